"""Generated practice activities: LLM drafts, validated, verified in the judge, stored."""
