"""The turn pipeline: system prompt, context building, and the two-phase turn loop."""
