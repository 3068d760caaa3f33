"""Settings read once from the environment (and an optional `.env` file).

Every knob of SPEC section 2 lives here with its default. `create_app(settings)` receives
one `Settings` value; nothing reads `os.environ` after start-up, so tests build their own.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from providers import BreakerPolicy, ProviderConfig

ProviderName = Literal["ollama", "openai", "openrouter", "cerebras", "chutes", "scripted"]


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

    `sessions` (chat sessions created) is not in SPEC's example; it has a built-in default
    like the others, so a RATE_LIMITS that names only some keys keeps the rest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turns: Rate | None = None
    runs: Rate | None = None
    generate: Rate | None = None
    login: Rate | None = None
    sessions: Rate | None = None


_RATE = re.compile(r"^\s*(\d+)\s*(?:/|per)\s*(\d+)?\s*(second|minute|hour|day)s?\s*$", re.IGNORECASE)
_UNIT_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
DEFAULT_RATE_LIMITS = "turns=30/minute,runs=60/minute,generate=5/hour,login=10/minute,sessions=60/hour"


def parse_rate(key: str, text: str) -> Rate | None:
    """`30/minute`, `5 per hour`, `100/10 minutes`, or `off`; anything else names the key."""
    if text.strip().lower() in {"off", "none", "unlimited"}:
        return None
    match = _RATE.match(text)
    if match is None or int(match.group(1)) < 1 or match.group(2) == "0":
        raise ValueError(f"bad rate {text.strip()!r} for {key!r}: use COUNT/UNIT (second, minute, hour or day), "
                         "e.g. 30/minute, 100/10 minutes, or off")
    count, multiple, unit = int(match.group(1)), int(match.group(2) or 1), match.group(3).lower()
    return Rate(count=count, window_s=multiple * _UNIT_S[unit], text=text.strip())


def parse_rate_limits(value: object) -> object:
    """`key=rate,key=rate` over the defaults; an unknown key or a bad rate is a ValueError
    (so `load_settings` raises a ConfigError naming RATE_LIMITS and the key)."""
    if not isinstance(value, str):
        return value
    rules: dict[str, Rate | None] = {}
    for text in (DEFAULT_RATE_LIMITS, value):
        for item in filter(str.strip, text.split(",")):
            key, sep, rate = (part.strip() for part in item.partition("="))
            if not sep:
                raise ValueError(f"expected key=rate, got {item.strip()!r} (e.g. turns=30/minute)")
            if key not in RateLimits.model_fields:
                raise ValueError(f"unknown limit {key!r} in {item.strip()!r}: the keys are "
                                 f"{', '.join(RateLimits.model_fields)} (e.g. turns=30/minute)")
            rules[key] = parse_rate(key, rate)
    return RateLimits(**rules)


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=5000, ge=1, le=65535)
    database_path: str = "./data/app.db"
    data_dir: str = "./data"
    llm_provider: ProviderName = "ollama"
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = None
    llm_fallbacks: str = ""
    llm_timeout_s: float = Field(default=120.0, gt=0)
    vision_provider: ProviderName | None = None
    vision_model: str | None = None
    vision_base_url: str | None = None
    vision_api_key: str | None = None
    vision_followup_turns: int = Field(default=2, ge=0)
    image_provider: Literal["openai", "chutes"] | None = None
    image_base_url: str | None = None
    image_api_key: str | None = None
    image_model: str | None = None
    search_url: str | None = None
    weather_url: str = "https://api.open-meteo.com/v1/forecast"
    geocoding_url: str = "https://geocoding-api.open-meteo.com/v1/search"
    scripted_replies: str | None = None
    context_messages: int = Field(default=40, ge=1, le=1000)
    max_tool_rounds: int = Field(default=1, ge=1, le=5)
    auth_token_file: str = "./data/admin.token"
    judge_enabled: bool | None = None
    system_prompt_file: str | None = None
    trace_enabled: bool = False
    web_threads: int = Field(default=32, ge=1, le=1024)  # ordinary requests; streams hold none
    turn_workers: int = Field(default=64, ge=1, le=1024)  # turns running at once (more wait their turn)
    header_timeout_s: float = Field(default=10.0, gt=0, le=300)  # a request's head and body must arrive in time
    keepalive_s: float = Field(default=5.0, gt=0, le=300)  # an idle kept-alive connection is closed after this
    max_connections: int = Field(default=20_000, ge=10, le=1_000_000)  # open connections, streams included
    sse_heartbeat_s: float = Field(default=15.0, gt=0, le=15.0)
    access_log: bool = False
    allow_private_fetch: bool = False
    judge_pool_size: int = Field(default=2, ge=0, le=16)
    max_streams_per_user: int = Field(default=8, ge=1, le=1_000_000)  # open event streams one user may hold
    rate_limits: Annotated[RateLimits, BeforeValidator(parse_rate_limits)] = Field(  # per user; 429 beyond
        default_factory=lambda: parse_rate_limits(""))
    fallback_api_keys: dict[str, str] = Field(default_factory=dict)
    provider_breaker_failures: int = Field(default=3, ge=0, le=1000)  # consecutive timeouts that open a circuit; 0: off
    provider_breaker_cooldown_s: float = Field(default=30.0, gt=0, le=3600)  # an open circuit fails fast this long
    sandbox_workers: int = Field(default=4, ge=1, le=256)  # worker processes for untrusted work, all kinds and users

    def breaker_policy(self) -> BreakerPolicy | None:
        """Each provider's circuit breaker (provider_breaker.py), or None when turned off."""
        if self.provider_breaker_failures == 0:
            return None
        return BreakerPolicy(failures=self.provider_breaker_failures, cooldown_s=self.provider_breaker_cooldown_s)

    def llm_config(self) -> ProviderConfig:
        return ProviderConfig(
            provider=self.llm_provider,
            model=self.llm_model,
            base_url=self.llm_base_url,
            api_key=self.llm_api_key,
            timeout_s=self.llm_timeout_s,
            scripted_replies=self.scripted_replies,
        )

    def vision_config(self) -> ProviderConfig:
        """The vision provider; every unset VISION_* value falls back to its LLM_* value."""
        if self.vision_provider is None or self.vision_provider == self.llm_provider:
            base = self.llm_config()
            return base.model_copy(
                update={
                    "model": self.vision_model or base.model,
                    "base_url": self.vision_base_url or base.base_url,
                    "api_key": self.vision_api_key or base.api_key,
                }
            )
        return ProviderConfig(
            provider=self.vision_provider,
            model=self.vision_model,
            base_url=self.vision_base_url,
            api_key=self.vision_api_key,
            timeout_s=self.llm_timeout_s,
            scripted_replies=self.scripted_replies,
        )

    @property
    def uploads_dir(self) -> Path:
        return Path(self.data_dir) / "uploads"


_ENV_NAMES = {name: name.upper() for name in Settings.model_fields if name != "fallback_api_keys"}


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
    raw = {field: merged[env] for field, env in _ENV_NAMES.items() if merged.get(env, "") != ""}
    raw["fallback_api_keys"] = {
        name: merged[f"{name.upper()}_API_KEY"]
        for name in ("ollama", "openai", "openrouter", "cerebras", "chutes")
        if merged.get(f"{name.upper()}_API_KEY")
    }
    if "judge_enabled" in raw:
        raw["judge_enabled"] = raw["judge_enabled"].strip().lower() in {"1", "true", "yes", "on"}
    for flag in ("trace_enabled", "access_log", "allow_private_fetch"):
        if flag in raw:
            raw[flag] = raw[flag].strip().lower() in {"1", "true", "yes", "on"}
    try:
        return Settings(**raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{_ENV_NAMES.get(str(item['loc'][0]), item['loc'][0])}: {item['msg']}" for item in error.errors()
        )
        raise ConfigError(f"invalid configuration: {problems}") from error
