# The two commands of the README; each does all set-up first.
.PHONY: run test bench setup demo judge-images

run:
	scripts/run.sh

test:
	scripts/test.sh

setup:
	scripts/setup.sh

# Docker engine and the code judge's images (built from Debian packages; see judge/recipes.py).
judge-images:
	scripts/judge_images.sh

# Full tool turns without any model: the scripted provider and examples/scripted_demo.json.
demo:
	LLM_PROVIDER=scripted SCRIPTED_REPLIES=examples/scripted_demo.json scripts/run.sh

bench:
	scripts/setup.sh --test
	.venv/bin/python bench/turn_overhead.py

# The real Open WebUI (its own venv, OPENWEBUI_VENV, created if missing: ~7.4 GB) in front of /v1.
.PHONY: openwebui-check
openwebui-check:
	scripts/openwebui_check.sh
