"""Settings read once from the environment (and an optional `.env` file).

Every knob of SPEC section 2 lives here with its default. `create_app(settings)` receives
one `Settings` value; nothing reads `os.environ` after start-up, so tests build their own.

This wing is a leaf: it imports nothing of the product. What the settings build (the store,
the provider chains, the tracer) is built where the app is made, from these plain values;
which provider names exist is the provider registry's to say (`providers.py`, checked at the
start with an error naming the setting). A boolean setting takes `1`/`true`/`yes`/`on` or
`0`/`false`/`no`/`off`; any other word stops the start with an error naming the setting.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from config.approval import ApprovalPolicy, checked_approval, default_approval
from config.database_url import DatabaseTarget, checked_database_url, parse_database_url
from config.origins import checked_origins, checked_public_url


class ConfigError(Exception):
    """The environment holds a value the product cannot run with."""


class Rate(BaseModel):
    """At most `count` requests in any `window_s` seconds (a moving window)."""

    model_config = ConfigDict(frozen=True)

    count: int = Field(ge=1)
    window_s: int = Field(ge=1)
    text: str  # as the operator wrote it, for messages

    def __str__(self) -> str:
        return self.text


class RateLimits(BaseModel):
    """`RATE_LIMITS`, parsed: the per-user budget of each limited action (None = unlimited).

    `sessions` (chat sessions created), `imports` (chats imported) and `tools` (direct `POST /tools/<name>` calls of tools
    that reach no paid service) are not in SPEC's example; they have built-in defaults like the
    others, so a RATE_LIMITS that names only some keys keeps the rest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turns: Rate | None = None
    runs: Rate | None = None
    generate: Rate | None = None
    login: Rate | None = None
    sessions: Rate | None = None
    tools: Rate | None = None
    imports: Rate | None = None  # chats imported from a JSON export (`POST /sessions/import`)


_RATE = re.compile(r"^\s*(\d+)\s*(?:/|per)\s*(\d+)?\s*(second|minute|hour|day)s?\s*$", re.IGNORECASE)
_UNIT_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
DEFAULT_RATE_LIMITS = (
    "turns=30/minute,runs=60/minute,generate=5/hour,login=10/minute,sessions=60/hour,tools=60/minute,imports=20/hour"
)


def parse_rate(key: str, text: str) -> Rate | None:
    """`30/minute`, `5 per hour`, `100/10 minutes`, or `off`; anything else names the key."""
    if text.strip().lower() in {"off", "none", "unlimited"}:
        return None
    match = _RATE.match(text)
    if match is None or int(match.group(1)) < 1 or match.group(2) == "0":
        raise ValueError(
            f"bad rate {text.strip()!r} for {key!r}: use COUNT/UNIT (second, minute, hour or day), "
            "e.g. 30/minute, 100/10 minutes, or off"
        )
    count, multiple, unit = int(match.group(1)), int(match.group(2) or 1), match.group(3).lower()
    return Rate(count=count, window_s=multiple * _UNIT_S[unit], text=text.strip())


def default_rate_limits() -> RateLimits:
    """The built-in budgets (`DEFAULT_RATE_LIMITS`), when RATE_LIMITS is not set."""
    return parse_limits_text("")


def parse_limits_text(value: str) -> RateLimits:
    """`key=rate,key=rate` over the defaults; an unknown key or a bad rate is a ValueError."""
    rules: dict[str, Rate | None] = {}
    for text in (DEFAULT_RATE_LIMITS, value):
        for item in filter(str.strip, text.split(",")):
            key, sep, rate = (part.strip() for part in item.partition("="))
            if not sep:
                raise ValueError(f"expected key=rate, got {item.strip()!r} (e.g. turns=30/minute)")
            if key not in RateLimits.model_fields:
                raise ValueError(
                    f"unknown limit {key!r} in {item.strip()!r}: the keys are "
                    f"{', '.join(RateLimits.model_fields)} (e.g. turns=30/minute)"
                )
            rules[key] = parse_rate(key, rate)
    return RateLimits(**rules)


def parse_rate_limits(value: object) -> object:
    """`key=rate,key=rate` over the defaults; an unknown key or a bad rate is a ValueError
    (so `load_settings` raises a ConfigError naming RATE_LIMITS and the key)."""
    return parse_limits_text(value) if isinstance(value, str) else value


def checked_proxies(value: object) -> object:
    """`TRUSTED_PROXIES`: comma-separated addresses or networks (`10.0.0.0/8`), or `*`; normalised
    to `, `-joined text. A value that is neither stops the start with an error naming it."""
    if not isinstance(value, str):
        return value
    items = [item.strip() for item in value.split(",") if item.strip()]
    for item in items:
        if item == "*":
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValueError(f"{item!r} is not an address or network (e.g. 127.0.0.1, 10.0.0.0/8)") from None
    return ",".join(items)


def checked_cookie_secure(value: object) -> object:
    """`COOKIE_SECURE`: `auto`, or a boolean written as `.env` booleans are (`1`, `true`, `0`, `off`)."""
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    return {"true": "1", "yes": "1", "on": "1", "false": "0", "no": "0", "off": "0"}.get(text, text)


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    host: str = Field(default="127.0.0.1", description="Address the server listens on (`0.0.0.0`: every interface).")
    port: int = Field(default=5000, ge=1, le=65535, description="Port the server listens on.")
    public_url: Annotated[str | None, BeforeValidator(checked_public_url)] = Field(
        default=None,
        description="The address people and MCP hosts reach the server at when it is not `HOST`:`PORT` (behind a "
        "reverse proxy or a container's published port), e.g. `https://chat.example.com`: `/mcp` accepts its host "
        "in `Host` and its origin in `Origin` (see `MCP_ALLOWED_ORIGINS`). Unset: only `HOST` and loopback.",
    )
    database_path: str = Field(
        default="./data/app.db",
        description="The SQLite database file, created on first start (its `-wal` and `-shm` files sit beside it).",
    )
    database_url: Annotated[str | None, BeforeValidator(checked_database_url)] = Field(
        default=None,
        description="Where the data lives: `sqlite:///PATH` (the embedded default: unset means "
        "`sqlite:///` + `DATABASE_PATH`) or `postgresql://user:password@host:port/dbname`, a PostgreSQL server "
        "shared by every server process on every host (see Running on several machines).",
    )
    database_pool_size: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="With a `postgresql://` `DATABASE_URL`: most connections one server process keeps to "
        "PostgreSQL (held by a request or turn only while its SQL runs, not while a turn waits on its model or "
        "a tool; a statement that finds none free waits up to 10 s, then gets a 503).",
    )
    data_dir: str = Field(
        default="./data",
        description="Uploaded and generated images (`uploads/`, `generated/`), the users' workspaces "
        "(`workspaces/`) and the web UI's cookie key (`secret.key`).",
    )
    llm_provider: str = Field(
        default="ollama",
        description="The chat model's provider: `ollama`, `openai` (any OpenAI-compatible server: vLLM, llama.cpp, "
        "LM Studio, OpenAI), `openrouter`, `cerebras`, `chutes`, or `scripted` (replies from "
        "`SCRIPTED_REPLIES`, no model).",
    )
    llm_base_url: str | None = Field(
        default=None,
        description="Base URL of the provider (for `openai` it ends in `/v1`, e.g. `http://127.0.0.1:8000/v1`). "
        "Unset: the provider's public URL; for ollama `http://127.0.0.1:11434`.",
    )
    llm_model: str | None = Field(
        default=None,
        description="Model name, e.g. `qwen2.5:7b` (ollama) or `meta-llama/llama-3.3-70b-instruct` (openrouter).",
    )
    llm_api_key: str | None = Field(default=None, description="Bearer key of the provider (unset: none is sent).")
    llm_fallbacks: str = Field(
        default="",
        description="Comma-separated `provider:model` tried in order when the primary fails, e.g. "
        "`openrouter:meta-llama/llama-3.3-70b-instruct,ollama:qwen2.5:7b`. A fallback of the primary's "
        "own provider reuses its base URL and key; another provider uses its public base URL and the key "
        "in `<PROVIDER>_API_KEY`.",
    )
    llm_timeout_s: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="Deadline in seconds for a provider call's first token: from connect (headers included) until "
        "the first piece of the answer arrives. A cold CPU model may need minutes to load and read a long "
        "prompt. An answer that keeps streaming is never cut by a timer (see `LLM_IDLE_TIMEOUT_S`).",
    )
    llm_wait_s: float = Field(
        default=180.0,
        gt=0,
        le=7200,
        description="Longest total wait in seconds, per turn, for the model's first token: every call of the turn "
        "(the retry of a failed call, each fallback of `LLM_FALLBACKS`, each pass after a tool) draws its wait until "
        "the first piece of the answer from this one budget, and once it is used up no further call is made and the "
        "turn ends with `provider_unavailable` (the model is not answering). A call's own deadline is the sooner of "
        "`LLM_TIMEOUT_S` and what is left. An answer that has started is never cut by it. While the model is waited "
        "for, the turn says `provider.waiting` every second.",
    )
    llm_idle_timeout_s: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="Longest silence in seconds between two chunks of a streaming answer, once it has started: "
        "a server that stops sending for this long is cut off (and counts for its circuit breaker).",
    )
    llm_max_tokens: int = Field(
        default=4096,
        ge=1,
        le=262_144,
        description="Bound on an answer's length in tokens, sent to the provider as `max_tokens` (OpenAI-compatible "
        "servers, openrouter, cerebras, chutes) or `options.num_predict` (ollama); the reply caps still apply.",
    )
    vision_provider: str | None = Field(
        default=None,
        description="Provider for turns with images and for `/image_analyze`. Unset: `LLM_PROVIDER`; while it is "
        "unset or the same as `LLM_PROVIDER`, each unset `VISION_*` value is taken from its `LLM_*` value.",
    )
    vision_model: str | None = Field(default=None, description="Model of the vision provider (see `VISION_PROVIDER`).")
    vision_base_url: str | None = Field(
        default=None, description="Base URL of the vision provider (see `VISION_PROVIDER`)."
    )
    vision_api_key: str | None = Field(default=None, description="Key of the vision provider (see `VISION_PROVIDER`).")
    vision_followup_turns: int = Field(
        default=2, ge=0, description="Turns after an image during which the image stays in the context."
    )
    image_provider: Literal["openai", "chutes"] | None = Field(
        default=None,
        description="Image generation for `/imagine`: `openai` (the images API shape, `/images/generations`) or "
        "`chutes`. Unset: `/imagine` answers that it is not configured.",
    )
    image_base_url: str | None = Field(default=None, description="Base URL of the image provider.")
    image_api_key: str | None = Field(default=None, description="Key of the image provider.")
    image_model: str | None = Field(default=None, description="Model of the image provider.")
    search_url: str | None = Field(
        default=None,
        description="Backend of `/web_search`: a SearXNG instance (queried as `/search?format=json`; trusted, not "
        "SSRF-checked). Unset: DuckDuckGo's HTML page.",
    )
    weather_url: str = Field(
        default="https://api.open-meteo.com/v1/forecast", description="Open-Meteo forecast URL of `/weather`."
    )
    geocoding_url: str = Field(
        default="https://geocoding-api.open-meteo.com/v1/search",
        description="Open-Meteo geocoding URL of `/weather` (place names to coordinates).",
    )
    scripted_replies: str | None = Field(
        default=None,
        description="Path of the JSON reply file of the `scripted` provider (see Scripted reply files), e.g. "
        "`examples/scripted_demo.json`.",
    )
    context_messages: int = Field(
        default=40, ge=1, le=1000, description="How many stored messages go into the model's context (1-1000)."
    )
    max_tool_rounds: int = Field(
        default=1,
        ge=1,
        le=5,
        description="Tool rounds per user turn, 1-5 (1 = strict two-phase: one command, then the answer).",
    )
    tool_approval: Annotated[ApprovalPolicy, BeforeValidator(checked_approval)] = Field(
        default_factory=default_approval,
        description="Which commands the model writes ask the user before they run (a confirm widget showing the "
        "exact command; over `/v1` a question the next message answers): a comma list read left to right, "
        "`default` (MCP tools not annotated read-only or annotated destructive, `/memory_sql` UPDATE, "
        "`/write_file`, `/edit_file`), `none`, `all`, `mcp`, `mcp:all`, `memory_sql:update` or a command name, "
        "each `+` (ask) or `-` (never ask), e.g. `default,+run_code,-write_file`; a bad item stops the start "
        "with an error naming it (see Approval before risky calls). Direct calls (`POST /tools/<name>`, `/mcp`) never ask.",
    )
    prompt_demos: int = Field(
        default=1,
        ge=0,
        le=1,
        description="`1`: a first pass's context carries a few demonstration exchanges generated from the "
        "command list (a request answered by a command line, for up to three kinds of tool, each followed by "
        "a plain answer, the last exchange plain; never a command whose argument can be any sentence), "
        "between the system prompt and the history; never stored or shown. `0`: none.",
    )
    llm_grammar: Literal["off", "first_line"] = Field(
        default="off",
        description="`first_line`: on passes that may use a command, send providers that accept one (llama.cpp's "
        "server and llama-cpp-python, through `LLM_PROVIDER=openai`) a GBNF grammar allowing either a "
        "registered command line (with its body where the command takes one) or text that does not start "
        "with `/`. A server that rejects the `grammar` field answers 400: leave it `off` there.",
    )
    llm_decide: Literal["auto", "greedy", "mass"] = Field(
        default="auto",
        description="How a first pass decides between a command and prose (SPEC 6.11). `greedy`: the text as "
        "the model samples it. `mass`: first read the first token's probabilities (`logprobs`): a command only "
        "when tokens that start one carry more than `LLM_DECIDE_THRESHOLD` of the probability, then the offered "
        "command with the best mean per-token score, then its arguments, steered by a grammar where the server "
        "takes one. `auto`: `mass` on a provider found to return log-probabilities, `greedy` elsewhere "
        "(detected on the first call, never assumed). See docs/models.md.",
    )
    llm_decide_threshold: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="With the `mass` decision: the share of the first token's probability that tokens starting a "
        "command must exceed for the pass to write a command (0.5: more than everything else together).",
    )
    command_shortlist: int = Field(
        default=3,
        ge=0,
        le=100,
        description="With the `mass` decision: how many commands it scores, the ones whose name, description, "
        "usage and examples best match the user's words (BM25); each is one short read. The prompt still "
        "lists every offered command (up to `PROMPT_COMMANDS`), so a server's prefix cache holds. `0`: score "
        "them all.",
    )
    prompt_commands: int = Field(
        default=30,
        ge=1,
        le=10_000,
        description="The most commands a prompt lists whole. A turn that can use more (many MCP tools) lists the "
        "8 that best match the user's words (BM25 over name, description, usage and examples) in a message of "
        "their own just before the user's message, after the fixed system prompt, the demonstrations and the "
        "history, so a model server's prefix cache still holds them; the decision scores the best "
        "`COMMAND_SHORTLIST` of those 8.",
    )
    llm_temperature: float | None = Field(
        default=None,
        ge=0,
        le=2,
        description="Sampling temperature sent to the chat model, only when set (unset: the server's own default, "
        "0.8 on llama.cpp). `app.py eval` sends 0 unless `--temperature` says otherwise.",
    )
    llm_seed: int | None = Field(
        default=None,
        ge=0,
        le=2**31 - 1,
        description="Sampling seed sent to the chat model, only when set (llama.cpp, vLLM, OpenAI and Ollama read "
        "it). `app.py eval` sends one unless `--seed` says otherwise.",
    )
    auth_token_file: str = Field(
        default="./data/admin.token",
        description="Where the first start writes the `admin` user's API token (mode 0600); `reset-admin-token` "
        "writes a new one here.",
    )
    judge_enabled: bool | None = Field(
        default=None,
        description="`1` uses the Docker judge (`/run`, `/submit`, `/run_code`, generated problems, `code_test` "
        "tasks), `0` turns it off. Unset: used when a Docker engine answers (`DOCKER_HOST` or the "
        "local socket); without one the server starts and `/health` says why the judge is unavailable.",
    )
    system_prompt_file: str | None = Field(
        default=None,
        description="A file whose text replaces the persona part of the system prompt (the command list is "
        "always generated from the registry). Unset: the built-in persona.",
    )
    mcp_servers: str | None = Field(
        default=None,
        description="A JSON file listing the MCP servers whose tools become commands (SPEC 14): "
        '`{"mcpServers": {"<key>": {"command", "args", "env", "cwd"} or {"url", "headers"}}}`, plus per server '
        '`"allow"` (tool names; absent: all), `"prefix"` (absent: the key and `_`), `"timeout_s"` (a call\'s '
        'deadline, default 30) and for HTTP `"trusted": true` (a server on a private address: the SSRF rules are '
        "skipped). See Tools from MCP servers. Unset: no MCP server.",
    )
    mcp_allowed_origins: Annotated[str, BeforeValidator(checked_origins)] = Field(
        default="default",
        description="Web pages allowed to call `/mcp` (DNS-rebinding protection, as MCP's transport requires): "
        "comma-separated origins `scheme://host[:port]` and the word `default`, which stands for "
        "`http://127.0.0.1:PORT`, `http://localhost:PORT`, `http://[::1]:PORT`, `http://HOST:PORT` and the origin "
        "of `PUBLIC_URL`. A request whose `Origin` is present and not listed answers 403 `origin_not_allowed`; "
        "one without `Origin` (SDK clients, curl) passes. `Host` must name loopback, `HOST` (any IP address when "
        "`HOST` is `0.0.0.0` or `::`), `PUBLIC_URL`'s host or a listed origin's, else 403 `host_not_allowed`. "
        "E.g. `default,https://app.example.org` lets one more page call it; a bad item stops the start.",
    )
    trace_enabled: bool = Field(
        default=False,
        description="`1` serves `GET /sessions/<id>/trace` (a turn's internal steps); off it answers 404.",
    )
    web_threads: int = Field(
        default=32,
        ge=1,
        le=1024,
        description="Threads for ordinary requests (open streams and waiting turns hold none).",
    )
    turn_workers: int = Field(default=64, ge=1, le=1024, description="Turns that run at once (more wait for a worker).")
    turn_share: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="Most turns one user runs at once, out of `TURN_WORKERS`; the user's next turns wait (holding no "
        "worker) until one of theirs ends, while other users' turns start: a freed worker goes to the waiting user "
        "running the fewest. `0`: a quarter of `TURN_WORKERS` (at least 1).",
    )
    max_turn_s: float = Field(
        default=900.0,
        gt=0,
        le=86_400,
        description="A turn's total time, from when it starts to run: at the limit it ends as Stop ends it, keeping "
        "the answer shown so far (`stop_reason` `time_limit`). Generous for real models (a slow model may stream "
        "for minutes); it only ends answers that never finish.",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="A request (head and body) must arrive within this many seconds of its first byte.",
    )
    keepalive_s: float = Field(
        default=5.0, gt=0, le=300, description="An idle kept-alive connection is closed after this many seconds."
    )
    max_connections: int = Field(
        default=20_000,
        ge=10,
        le=1_000_000,
        description="Open connections (streams included) before new requests answer 503.",
    )
    sse_heartbeat_s: float = Field(
        default=15.0,
        gt=0,
        le=15.0,
        description="Seconds of silence on an event stream before a heartbeat (at most 15).",
    )
    access_log: bool = Field(default=False, description="`1` writes uvicorn's access log.")
    trusted_proxies: Annotated[str, BeforeValidator(checked_proxies)] = Field(
        default="",
        description="Comma-separated addresses or networks (`127.0.0.1`, `10.0.0.0/8`) of the reverse proxies in "
        "front of the server: only from those peers are `X-Forwarded-For` (the client's address, which the "
        "`login` budget counts) and `X-Forwarded-Proto` (HTTPS, see `COOKIE_SECURE`) believed. Unset: no "
        "peer is trusted and the address is the connection's (see Several processes behind nginx).",
    )
    cookie_secure: Annotated[Literal["auto", "1", "0"], BeforeValidator(checked_cookie_secure)] = Field(
        default="auto",
        description="The web login cookie's `Secure` attribute: `auto` sets it on a request that came over HTTPS "
        "(behind a proxy of `TRUSTED_PROXIES`: one that says `X-Forwarded-Proto: https`), `1` always (the "
        "browser then sends it over HTTPS only), `0` never.",
    )
    signup_enabled: bool = Field(
        default=False,
        description="`1` lets anyone who reaches the server create a plain user with a name and password "
        "(`POST /api/signup`, the sign-in page's Create an account link); off, accounts come from an admin "
        "or `python app.py create-user`, and `POST /api/signup` answers 403 `signup_disabled`.",
    )
    allow_private_fetch: bool = Field(
        default=False,
        description="`1` lets `/open_url` reach loopback and private addresses (tests, private deployments; cloud "
        "metadata addresses stay refused).",
    )
    judge_runs: int = Field(
        default=4,
        ge=1,
        le=256,
        description="Judge runs (`/run`, `/submit`, `/run_code`, `code_test` checks) holding a sandbox at once, "
        "over every user; a place that comes free goes to the waiting user holding the fewest, and a run that "
        "finds none within 10 s answers 503 `busy` with `Retry-After` (a BUSY tool error in chat).",
    )
    judge_pool_size: int = Field(
        default=2, ge=0, le=16, description="Pre-started single-use judge containers per image (0-16)."
    )
    docker_host: str | None = Field(
        default=None,
        description="The judge's Docker engine, as for the Docker CLI: `unix:///var/run/docker.sock`, "
        "`tcp://judge-host:2376` (TLS required: set `DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH`; plain tcp is "
        "refused) or `ssh://user@judge-host` (key and `known_hosts` in the server user's `~/.ssh`; the judge host "
        "needs the docker CLI); the judge images must be loaded there (see Running on several machines). "
        "Unset: the local engine.",
    )
    docker_tls_verify: str | None = Field(
        default=None,
        description="Any non-empty value (even `0`, as for the Docker CLI): verify the engine's certificate "
        "against `ca.pem` of `DOCKER_CERT_PATH` and present the client certificate.",
    )
    docker_cert_path: str | None = Field(
        default=None,
        description="Directory holding `ca.pem`, `cert.pem` and `key.pem` for a `tcp://` `DOCKER_HOST` "
        "(readable by the server's user only: the key opens the judge host).",
    )
    max_streams_per_user: int = Field(
        default=8,
        ge=1,
        le=1_000_000,
        description="Open event streams one user may hold (streamed `POST /chat` and widget answers, "
        "`/generate/stream`, `/trace`), across every process with `REDIS_URL`; the next answers 429.",
    )
    rate_limits: Annotated[RateLimits, BeforeValidator(parse_rate_limits)] = Field(
        default_factory=default_rate_limits,
        description="Per-user budgets, 429 beyond: SPEC's keys plus `sessions` (chat sessions created) and `tools` (direct tool calls); "
        "`COUNT/UNIT` with unit second, minute, hour or day (`100/10 minutes`, `5 per hour` also work) "
        "or `off`; keys left out keep their defaults; an unknown key or a bad rate stops the start with "
        "an error naming it (see Per-user limits).",
    )
    fallback_api_keys: dict[str, str] = Field(
        default_factory=dict,
        description="Keys for fallbacks of another provider than the primary's (see `LLM_FALLBACKS`), one variable "
        "per provider.",
    )
    provider_breaker_failures: int = Field(
        default=3,
        ge=0,
        le=1000,
        description="Turns in a row whose calls to one provider ended with a server fault (no first token within "
        "`LLM_TIMEOUT_S`, an answer silent for `LLM_IDLE_TIMEOUT_S`, refused or cut connections, 5xx, unreadable "
        "replies; never a long answer, a cancel, a 429 or another 4xx) that open its circuit: its calls then fail at "
        "once (the chain goes to the next provider) until the cool-down ends, when one call probes it. One turn counts "
        "once, however many calls its retry and fallbacks made, so one user's failing turn never refuses the others'. "
        "`0` turns the breaker off. `/health` shows each provider's `breaker` (`state`, `failures`, `retry_at`).",
    )
    provider_breaker_cooldown_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Seconds an open circuit fails fast before one call probes the provider again.",
    )
    sandbox_workers: int = Field(
        default=4,
        ge=1,
        le=256,
        description="Worker processes for untrusted work (`/memory_sql`, task SQL checks, `/search_files`, "
        "`/open_url` parsing) over every kind and user, idle ones included, so the server's extra memory "
        "stays under this many times one worker's limit (its imports plus 64 MB); a worker that comes free goes to "
        "the waiting user holding the fewest, and a job that finds every worker busy waits at most its own "
        "deadline, then its tool answers BUSY (503 `busy` with `Retry-After` over `POST /tools/<name>`).",
    )
    redis_url: str | None = Field(
        default=None,
        description="`redis://[:password@]host:port/db` (or `rediss://`): events (ids, replay), the active turn of "
        "each session, cancellation and `RATE_LIMITS` live in this Redis, shared by every server process on "
        "every host (see Running on several machines); unset: all in this process.",
    )
    redis_turn_lease_s: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        description="With `REDIS_URL`: how long a running turn holds its session, and an open stream its seat "
        "(`MAX_STREAMS_PER_USER`), without its process renewing the claim (renewed every third of it); a process "
        "killed mid-turn leaves the session usable, and its streams' seats free, after this.",
    )

    health_cache_s: float = Field(
        default=2.0,
        ge=0,
        le=60,
        description="How long `GET /health` and `GET /health/ready` reuse one probe of each dependency (the "
        "database's write probe, the providers, the judge, Redis), shared by every caller: a probe runs at most "
        "once per this many seconds and never twice at once; `0`: every call probes (still one at a time). "
        "`GET /health/live` probes nothing.",
    )

    provider_recheck_s: float = Field(
        default=5.0,
        ge=0,
        le=60,
        description="How old the providers' probe (reused up to 30 s) must be before `GET /api/status?recheck=1` "
        "(the web UI's model banner: on load, on window focus, after a failed turn, while the model is down) "
        "probes them again: one probe per this many seconds at most, however many pages ask.",
    )

    metrics_token: str | None = Field(
        default=None,
        description="Bearer token `GET /metrics` (Prometheus text) asks for: `Authorization: Bearer <token>`. "
        "Unset: `/metrics` answers 404 unless `METRICS_OPEN=1`. Each server process answers for itself.",
    )
    metrics_open: bool = Field(
        default=False,
        description="`1`: `GET /metrics` answers without a token (only where the port is reachable by the "
        "monitoring network alone).",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="`json`: log lines are JSON objects (`time`, `level`, `logger`, `message`, and `trace_id` / "
        "`span_id` inside a traced request or turn); `text`: plain lines.",
    )
    otel_exporter_otlp_endpoint: str | None = Field(
        default=None,
        description="Base URL of an OTLP/HTTP collector (e.g. `http://collector:4318`): traces are posted to "
        "its `/v1/traces`. Unset (and no `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`): tracing is off.",
    )
    otel_exporter_otlp_traces_endpoint: str | None = Field(
        default=None, description="Full URL traces are posted to (wins over `OTEL_EXPORTER_OTLP_ENDPOINT`)."
    )
    otel_exporter_otlp_headers: str | None = Field(
        default=None,
        description="Headers sent with each export, `key=value` pairs separated by commas (values URL-encoded), "
        "e.g. `authorization=Bearer%20abc`.",
    )
    otel_exporter_otlp_protocol: Literal["http/protobuf"] = Field(
        default="http/protobuf", description="OTLP transport; only `http/protobuf` is built in."
    )
    otel_exporter_otlp_timeout: int = Field(
        default=10000, ge=1, le=300000, description="Milliseconds one export may take before it is dropped."
    )
    otel_service_name: str = Field(default="orchestrator", description="`service.name` of the exported spans.")
    otel_instrumentation_genai_capture_message_content: bool = Field(
        default=False,
        description="`true` (or `SPAN_ONLY`): spans carry message text, tool arguments and tool output "
        "(`gen_ai.input.messages`, `gen_ai.output.messages`, `gen_ai.tool.call.arguments`, "
        "`gen_ai.tool.call.result`). Off: never any text of a user, a model or a tool.",
    )

    def database_target(self) -> DatabaseTarget:
        """`DATABASE_URL` parsed; unset: the SQLite file `DATABASE_PATH` (config/database_url.py)."""
        if self.database_url:
            return parse_database_url(self.database_url)
        return DatabaseTarget("sqlite", self.database_path)

    @property
    def uploads_dir(self) -> Path:
        return Path(self.data_dir) / "uploads"


_ENV_NAMES = {name: name.upper() for name in Settings.model_fields if name != "fallback_api_keys"}
_API_KEY_SETTINGS = {env for env in _ENV_NAMES.values() if env.endswith("_API_KEY")}  # LLM_API_KEY…: not fallbacks


def read_dotenv(path: Path) -> dict[str, str]:
    """Parse a `.env` file (KEY=VALUE lines); a missing file is simply empty."""
    if not path.is_file():
        return {}
    from dotenv import dotenv_values

    return {key: value for key, value in dotenv_values(path).items() if value is not None}


def load_settings(environ: Mapping[str, str] | None = None, dotenv_path: Path | None = Path(".env")) -> Settings:
    """Build `Settings` from `.env` then the environment (the environment wins)."""
    merged: dict[str, str] = dict(read_dotenv(dotenv_path)) if dotenv_path else {}
    merged.update(os.environ if environ is None else environ)
    raw: dict[str, Any] = {field: merged[env] for field, env in _ENV_NAMES.items() if merged.get(env, "") != ""}
    raw["fallback_api_keys"] = {
        key.removesuffix("_API_KEY").lower(): value
        for key, value in merged.items()
        if key.endswith("_API_KEY") and key not in _API_KEY_SETTINGS and value
    }
    capture = "otel_instrumentation_genai_capture_message_content"
    if raw.get(capture, "").strip().lower() in {"span_only", "span_and_event"}:  # the OpenTelemetry spellings
        raw[capture] = "1"
    if "otel_exporter_otlp_headers" not in raw and merged.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS"):
        raw["otel_exporter_otlp_headers"] = merged["OTEL_EXPORTER_OTLP_TRACES_HEADERS"]
    try:
        return Settings(**raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{_ENV_NAMES.get(str(item['loc'][0]), item['loc'][0])}: {item['msg']}" for item in error.errors()
        )
        raise ConfigError(f"invalid configuration: {problems}") from error
