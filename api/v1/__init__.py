"""The OpenAI-compatible API (`/v1`, SPEC 11): routes, the two answer bodies, widget questions as
text, and OpenAI's wire shapes."""
