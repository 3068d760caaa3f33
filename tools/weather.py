"""`/weather [place]`: current conditions and a 3-day forecast from Open-Meteo.

Two keyless GETs: the geocoding API turns the place name into coordinates (first match),
then the forecast API answers `current`/`current_units` and `daily`/`daily_units` for
them, in the place's own time zone. An empty argument uses the user's saved `location`
profile field, so "what's the weather?" works without asking every time.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from storage.profile import get_field
from tools.base import READ_ONLY_WEB, CommandBinding, ErrorCode, Tool, ToolContext, ToolFailure, ToolInput, ToolOutput
from tools.upstream import Upstream, refuse_http_error, send

REQUEST_TIMEOUT_S = 10.0
FORECAST_DAYS = 3
LOCATION_FIELD = "location"
CURRENT_VARIABLES = "temperature_2m,relative_humidity_2m,apparent_temperature,precipitation,weather_code,wind_speed_10m"
DAILY_VARIABLES = "weather_code,temperature_2m_max,temperature_2m_min,precipitation_sum,precipitation_probability_max"

# WMO weather interpretation codes, as documented by Open-Meteo.
WMO_CODES: dict[int, str] = {
    0: "clear sky",
    1: "mainly clear",
    2: "partly cloudy",
    3: "overcast",
    45: "fog",
    48: "depositing rime fog",
    51: "light drizzle",
    53: "moderate drizzle",
    55: "dense drizzle",
    56: "light freezing drizzle",
    57: "dense freezing drizzle",
    61: "slight rain",
    63: "moderate rain",
    65: "heavy rain",
    66: "light freezing rain",
    67: "heavy freezing rain",
    71: "slight snowfall",
    73: "moderate snowfall",
    75: "heavy snowfall",
    77: "snow grains",
    80: "slight rain showers",
    81: "moderate rain showers",
    82: "violent rain showers",
    85: "slight snow showers",
    86: "heavy snow showers",
    95: "thunderstorm",
    96: "thunderstorm with slight hail",
    99: "thunderstorm with heavy hail",
}


def describe_code(code: int | None) -> str:
    if code is None:
        return "unknown conditions"
    return WMO_CODES.get(code, f"unknown conditions (WMO code {code})")


class WeatherInput(ToolInput):
    place: str = Field(
        default="",
        max_length=200,
        description="City or place name; empty uses the user's saved location.",
    )


class CurrentWeather(BaseModel):
    model_config = ConfigDict(frozen=True)

    time: str | None
    weather_code: int | None
    conditions: str
    temperature: float | None
    apparent_temperature: float | None
    relative_humidity: float | None
    precipitation: float | None
    wind_speed: float | None


class DayForecast(BaseModel):
    model_config = ConfigDict(frozen=True)

    date: str
    weather_code: int | None
    conditions: str
    temperature_max: float | None
    temperature_min: float | None
    precipitation_sum: float | None
    precipitation_probability_max: float | None


class WeatherUnits(BaseModel):
    """Units as Open-Meteo reports them (its defaults: metric)."""

    model_config = ConfigDict(frozen=True)

    temperature: str = "°C"
    relative_humidity: str = "%"
    precipitation: str = "mm"
    wind_speed: str = "km/h"
    precipitation_probability: str = "%"


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    separator = "" if unit == "%" else " "
    return f"{value:g}{separator}{unit}"


class WeatherOutput(ToolOutput):
    place: str
    latitude: float
    longitude: float
    timezone: str | None
    from_saved_location: bool
    current: CurrentWeather
    daily: list[DayForecast]
    units: WeatherUnits

    def render(self) -> str:
        u, now = self.units, self.current
        where = (
            f"{self.place} ({self.latitude:.2f}, {self.longitude:.2f}{'; ' + self.timezone if self.timezone else ''})"
        )
        lines = [f"Weather for {where}" + (" (the user's saved location)" if self.from_saved_location else "")]
        lines.append(
            f"Now ({now.time or 'latest'} local time): {now.conditions}, {_fmt(now.temperature, u.temperature)}"
            f" (feels like {_fmt(now.apparent_temperature, u.temperature)}),"
            f" humidity {_fmt(now.relative_humidity, u.relative_humidity)},"
            f" precipitation {_fmt(now.precipitation, u.precipitation)}, wind {_fmt(now.wind_speed, u.wind_speed)}"
        )
        lines.append(f"Forecast ({len(self.daily)} days):")
        for day in self.daily:
            lines.append(
                f"- {day.date}: {day.conditions}, {_fmt(day.temperature_min, u.temperature)} to"
                f" {_fmt(day.temperature_max, u.temperature)}, precipitation {_fmt(day.precipitation_sum, u.precipitation)}"
                f" ({_fmt(day.precipitation_probability_max, u.precipitation_probability)} chance)"
            )
        lines.append("Source: Open-Meteo.")
        return "\n".join(lines)


class GeocodedPlace(BaseModel):
    """The fields of one geocoding result this tool uses (others are ignored)."""

    name: str
    latitude: float
    longitude: float
    country: str | None = None
    admin1: str | None = None
    timezone: str | None = None

    def label(self) -> str:
        parts = [self.name]
        parts += [part for part in (self.admin1, self.country) if part and part not in parts]
        return ", ".join(parts)


def _get_json(ctx: ToolContext, url: str, params: dict[str, Any], what: str) -> dict[str, Any]:
    """GET one Open-Meteo endpoint; every transport or shape failure becomes a ToolFailure."""
    upstream = Upstream(name=f"the {what} service")
    response = send(upstream, "GET", url, params=params, timeout=ctx.remaining(REQUEST_TIMEOUT_S))
    try:
        data = response.json()
    except ValueError:
        data = None
    reason = data.get("reason") if isinstance(data, dict) else None
    refuse_http_error(upstream, response, f": {str(reason)[:200]}" if reason else "")
    if not isinstance(data, dict):
        raise ToolFailure(ErrorCode.UPSTREAM_ERROR, f"the {what} service sent an unreadable answer; try again later.")
    return data


def geocode(ctx: ToolContext, place: str) -> GeocodedPlace:
    params = {"name": place, "count": 1, "language": "en", "format": "json"}
    data = _get_json(ctx, ctx.settings.geocoding_url, params, "geocoding")
    results = data.get("results") or []  # no match: Open-Meteo omits `results`
    if not results:
        raise ToolFailure(ErrorCode.NOT_FOUND, f"no place named “{place}”; try a city name.")
    try:
        return GeocodedPlace.model_validate(results[0])
    except ValidationError as error:
        raise ToolFailure(
            ErrorCode.UPSTREAM_ERROR, "the geocoding service sent an incomplete result; try again later."
        ) from error


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _code(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None else None


def _column(daily: dict[str, Any], name: str, index: int) -> Any:
    values = daily.get(name)
    return values[index] if isinstance(values, list) and index < len(values) else None


def _mapping(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else empty (a missing or malformed units block)."""
    return value if isinstance(value, dict) else {}


def parse_forecast(data: dict[str, Any]) -> tuple[CurrentWeather, list[DayForecast], WeatherUnits]:
    """Read Open-Meteo's `current`, `daily` (parallel arrays keyed by `time`) and their units."""
    current, daily = data.get("current"), data.get("daily")
    if not isinstance(current, dict) or not isinstance(daily, dict) or not isinstance(daily.get("time"), list):
        raise ToolFailure(
            ErrorCode.UPSTREAM_ERROR, "the forecast service sent no current or daily data; try again later."
        )
    current_units, daily_units = _mapping(data.get("current_units")), _mapping(data.get("daily_units"))
    defaults = WeatherUnits()
    units = WeatherUnits(
        temperature=str(
            current_units.get("temperature_2m") or daily_units.get("temperature_2m_max") or defaults.temperature
        ),
        relative_humidity=str(current_units.get("relative_humidity_2m") or defaults.relative_humidity),
        precipitation=str(
            current_units.get("precipitation") or daily_units.get("precipitation_sum") or defaults.precipitation
        ),
        wind_speed=str(current_units.get("wind_speed_10m") or defaults.wind_speed),
        precipitation_probability=str(
            daily_units.get("precipitation_probability_max") or defaults.precipitation_probability
        ),
    )
    code = _code(current.get("weather_code"))
    now = CurrentWeather(
        time=str(current["time"]) if current.get("time") else None,
        weather_code=code,
        conditions=describe_code(code),
        temperature=_number(current.get("temperature_2m")),
        apparent_temperature=_number(current.get("apparent_temperature")),
        relative_humidity=_number(current.get("relative_humidity_2m")),
        precipitation=_number(current.get("precipitation")),
        wind_speed=_number(current.get("wind_speed_10m")),
    )
    days = []
    for index, date in enumerate(daily["time"][:FORECAST_DAYS]):
        day_code = _code(_column(daily, "weather_code", index))
        days.append(
            DayForecast(
                date=str(date),
                weather_code=day_code,
                conditions=describe_code(day_code),
                temperature_max=_number(_column(daily, "temperature_2m_max", index)),
                temperature_min=_number(_column(daily, "temperature_2m_min", index)),
                precipitation_sum=_number(_column(daily, "precipitation_sum", index)),
                precipitation_probability_max=_number(_column(daily, "precipitation_probability_max", index)),
            )
        )
    return now, days, units


def saved_location(ctx: ToolContext) -> str:
    field = get_field(ctx.conn, ctx.user_id, LOCATION_FIELD)
    if field is None or not isinstance(field.value, str) or not field.value.strip():
        raise ToolFailure(
            ErrorCode.VALIDATION_FAILED,
            "no place given and no saved location; give a place (e.g. Paris), or save a default location in"
            " the profile.",
            hint="Ask the user which place they mean, then call /weather <place> (e.g. /weather Paris).",
        )
    return field.value.strip()


def weather(data: WeatherInput, ctx: ToolContext) -> WeatherOutput:
    place = data.place or saved_location(ctx)
    found = geocode(ctx, place)
    params = {
        "latitude": found.latitude,
        "longitude": found.longitude,
        "current": CURRENT_VARIABLES,
        "daily": DAILY_VARIABLES,
        "timezone": "auto",
        "forecast_days": FORECAST_DAYS,
    }
    forecast = _get_json(ctx, ctx.settings.weather_url, params, "forecast")
    now, days, units = parse_forecast(forecast)
    return WeatherOutput(
        place=found.label(),
        latitude=found.latitude,
        longitude=found.longitude,
        timezone=str(forecast.get("timezone") or found.timezone or "") or None,
        from_saved_location=not data.place,
        current=now,
        daily=days,
        units=units,
    )


WEATHER_TOOL = Tool(
    name="weather",
    annotations=READ_ONLY_WEB,  # served over /mcp: asks a weather service; changes nothing
    description="Current weather and a 3-day forecast for a place (Open-Meteo); no place = the user's saved location.",
    input_model=WeatherInput,
    output_model=WeatherOutput,
    handler=weather,
    result_role="weather_tools",
    command=CommandBinding(
        name="weather",
        usage="/weather [place]",
        example="/weather Paris",
        args_field="place",
        request="What is the weather like in Paris today?",
    ),
    timeout_s=25.0,
    budget="turns",  # a direct call reaches the web
)
