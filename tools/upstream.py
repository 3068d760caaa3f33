"""One rule for the outside HTTP services tools call (Open-Meteo, SearXNG, DuckDuckGo, image providers).

A timeout becomes `TIMEOUT`; any other transport failure, and an HTTP status of 400 or more,
becomes `UPSTREAM_ERROR`, each with a message that names the service and says what to do.
The tools differ only in how they name the service and what they advise, so that wording is
an `Upstream` value, and the mapping is written once here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

from tools.base import ErrorCode, ToolFailure

RETRY_LATER = "try again later"


@dataclass(frozen=True)
class Upstream:
    """How the failure messages of one outside service read.

    `name` starts the sentence ("the image provider did not answer in time; …"); `on_timeout`
    and `on_status` are the advice after a timeout and after an HTTP error; `name_the_error`
    adds the transport error's type ("(ConnectionError)") to the could-not-be-reached message.
    """

    name: str
    on_timeout: str = RETRY_LATER
    on_status: str = RETRY_LATER
    name_the_error: bool = False


def send(upstream: Upstream, method: str, url: str, *, timeout: float, **kwargs: Any) -> requests.Response:
    """One HTTP call; a timeout or a transport failure raises the matching ToolFailure.

    The status is not checked here: some callers read a body or a special status first
    (then call `refuse_http_error`).
    """
    try:
        return requests.request(method, url, timeout=timeout, **kwargs)
    except requests.Timeout as error:
        raise ToolFailure(
            ErrorCode.TIMEOUT, f"{upstream.name} did not answer in time; {upstream.on_timeout}."
        ) from error
    except requests.RequestException as error:
        kind = f" ({type(error).__name__})" if upstream.name_the_error else ""
        raise ToolFailure(
            ErrorCode.UPSTREAM_ERROR, f"{upstream.name} could not be reached{kind}; {RETRY_LATER}."
        ) from error


def refuse_http_error(upstream: Upstream, response: requests.Response, detail: str = "") -> None:
    """Raise UPSTREAM_ERROR for an HTTP status of 400 or more; `detail` (": why") follows the status."""
    if response.status_code >= 400:
        raise ToolFailure(
            ErrorCode.UPSTREAM_ERROR,
            f"{upstream.name} answered HTTP {response.status_code}{detail}; {upstream.on_status}.",
        )
