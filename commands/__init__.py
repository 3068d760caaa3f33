"""Command detection (first line only), parsing into a frozen `Command`, and routing."""
