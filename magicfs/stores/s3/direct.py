"""Small S3 requests sent through less of botocore's machinery: the client's CPU per request.

A record PUT, a HEAD of a marker or a listing of ten keys costs the S3 client 2.5-5 ms of
CPU; SigV4 and the HTTP exchange are a third of that, the rest is botocore's machinery
around them: about fifteen events with three to ten handlers each, endpoint rules
evaluated anew for every request, the user-agent string rebuilt twice, the retry
handler's bookkeeping (docs/benchmarks.md, "The floor of a small request"). The job's
own requests (markers, records, the journal, completions, the clean-up) are sent one
after another, so a job of one large file waits for that CPU twice per round trip.

:class:`DirectRequests` sends such a request with the same aiobotocore client s3fs made,
keeping every step that decides *what* is sent and *what the answer means*:

* the parameters: s3fs's additions (the user's ``s3_additional_kwargs``: encryption,
  requester pays), then the client's ``provide-client-params`` and
  ``before-parameter-build`` events, botocore's own handlers included (SSE-C key
  digests, a listing's URL encoding, the checksum mode of a GET) and anyone else's;
* botocore's serialiser, its request checksums (``resolve_checksum_context``,
  ``apply_request_checksum``), the endpoint its rules give for the bucket and the
  operation, the ``before-call`` event (whose handler may answer in the store's place,
  as botocore allows) and the ``after-call`` event;
* one attempt through the client's own HTTP session, as botocore makes each attempt
  (``before-send``, the answer's checksum validation, ``before-parse``: S3's errors
  inside a 200 answer; botocore's parser);
* SigV4 by the client's own signer, with the client's credentials, refreshed as the
  client refreshes them.

What it leaves out, and so when a request goes the client's way instead:

* **botocore's retry loop.** Any answer but 2xx, 404, 412 and 416, and any failure to send
  or to read the answer, is shown to the client's ``needs-retry`` handlers, as botocore
  shows each failed attempt: its retry mode decides, counting this attempt as the
  first, and waits its back-off; its region redirects see the answer. Where it would
  send the request again, the request is sent again through the client (s3fs's
  ``_call_s3``: its retry mode, redirects and error naming), which starts its own
  count, so a request is sent at most once more than the client's retry configuration
  allows, never without the back-off botocore chose; every request here is safe to
  repeat (:mod:`.retry`, "Why repeating is safe"). Where it would not (a client
  configured for one attempt, an error botocore does not retry: ``AccessDenied``), the
  error is raised as the client raises it, and magicfs's retry policy decides, as it
  does for the client's way; a lost connection goes to s3fs's own repeats (the client's
  way) where s3fs has attempts left, as it would have been. (In botocore's ``standard``
  retry mode the retry quota pays for that retry and is not paid back as its own
  retry's success would: 5 of its 500 tokens, returned one per later success.) Every
  reply is shown to the reply watch (:class:`.rate.Replies`), as botocore's
  ``needs-retry`` event shows it. 404, 412 and 416 are final answers: raised as s3fs
  raises them.
* **The events of the steps it replaces**: ``before-endpoint-resolution`` (the endpoint
  is resolved once per bucket and operation: S3's rules read no other parameter, which
  a test checks against botocore's rules), ``request-created``, ``choose-signer``,
  ``before-sign``, and ``needs-retry`` and ``after-call-error`` but after a failed
  attempt. An operation on which
  anyone but botocore, aiobotocore and the reply watch registered a handler for one of
  them goes the client's way, so that a hook sees every request it asked to see;
  re-checked whenever a handler is registered.
* **Signers other than SigV4 for ``s3``**: anonymous access, S3 Express sessions,
  SigV4a (multi-region access points) and a ``signature_version`` of the user's go the
  client's way.
* **Bodies other than ``bytes`` up to** :data:`MAX_BODY` or a part whose payload hash its
  writer computed (:class:`.body.PartBody`, signed with that hash where botocore's
  signer would hash it, off the IO loop), and operations other than :data:`SERVED`:
  other parts, copies and streams go the client's way.
* The ``amz-sdk-invocation-id`` and ``amz-sdk-request`` headers (botocore's retry
  bookkeeping) and the user agent's per-request feature list: the user agent is the
  client's, built once.

Where the installed botocore or aiobotocore lacks one of the internals used here, every
request goes the client's way (:meth:`DirectRequests.send` returns ``None``); so does
every request of a client whose internal here was changed (a different signature or
result: a ``TypeError`` or ``AttributeError`` inside the direct way, never a store's
answer), from the first such request on, which is sent again the client's way, with
one warning naming the botocore and aiobotocore versions.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .body import PartBody
from .rate import show_reply

log = logging.getLogger("magicfs.s3.direct")

#: The operations sent here: the committers' small requests.
SERVED = frozenset(
    {
        "PutObject",
        "HeadObject",
        "GetObject",
        "DeleteObject",
        "DeleteObjects",
        "ListObjectsV2",
        "CreateMultipartUpload",
        "CompleteMultipartUpload",
        "AbortMultipartUpload",
        "ListMultipartUploads",
        "ListParts",
        "UploadPart",  # a part whose writer computed its payload hash (.body)
    }
)
#: Largest body sent here (records, markers, journals): a part goes the client's way.
MAX_BODY = 1 << 20
#: Answers other than 2xx that are final: raised as the client would raise them (no
#: such key or upload, a condition not met, a range past an object's end: an empty
#: record read from its first byte).
FINAL = frozenset({404, 412, 416})
#: Events of the steps replaced here: a foreign handler on one sends the client's way.
REPLACED_EVENTS = (
    "before-endpoint-resolution",
    "request-created",
    "choose-signer",
    "before-sign",
    "needs-retry",
    "after-call-error",
)
#: Modules whose handlers on those events the steps here stand in for.
OWN_MODULES = ("botocore.", "aiobotocore.")
#: The client internals used here (a botocore without one: the client's way).
INTERNALS = (
    "_emit_api_params",
    "_resolve_endpoint_ruleset",
    "_convert_to_request_dict",
    "_endpoint",
    "_request_signer",
    "_user_agent_creator",
    "_service_model",
)
#: The client's endpoint's internals used here.
ENDPOINT_INTERNALS = ("_do_get_response", "prepare_request", "_needs_retry")


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "(unknown)"


def _served_body(body: Any) -> bool:
    """A record's bytes, or a part whose payload hash is known (:mod:`.body`)."""
    if isinstance(body, PartBody):
        return body.sha256 is not None
    return isinstance(body, bytes) and len(body) <= MAX_BODY


def _module(handler: Any) -> str:
    target = getattr(handler, "func", handler)  # a functools.partial
    return getattr(target, "__module__", None) or type(target).__module__


@dataclass
class _Route:
    """Where one operation on one bucket goes: the endpoint, its headers and signing."""

    url: str
    headers: dict[str, str]
    properties: dict[str, Any]
    signing: dict[str, Any]
    auth_type: str


@dataclass
class _Client:
    """What is kept per aiobotocore client: its user agent, routes and hook checks."""

    user_agent: str
    routes: dict[tuple[str, str], _Route | None] = field(default_factory=dict)
    #: Operation -> whether a foreign handler is on a replaced event; valid while the
    #: emitter's lookup cache (replaced by botocore at every (un)registration) is ``seen``.
    hooked: dict[str, bool] = field(default_factory=dict)
    seen: Any = None


class DirectRequests:
    """Sends :data:`SERVED` requests with less of botocore's machinery (module docstring).

    ``on_reply``: called with ``response=(http_response, parsed)`` for every reply, as
    botocore's ``needs-retry`` event calls its handlers. magicfs's reply watch
    (:func:`.rate.show_reply`) is the one foreign ``needs-retry`` handler that does not
    send requests the client's way: this store's watch is shown its replies here.
    """

    def __init__(self, on_reply: Callable[..., None]) -> None:
        self.on_reply = on_reply
        #: Requests answered here (2xx, or its error raised: 404, 412, 416, or one
        #: botocore would not send again).
        self.sent = 0
        #: Requests attempted here and then sent again the client's way.
        self.handed_back = 0
        self._clients: weakref.WeakKeyDictionary[Any, _Client | None] = weakref.WeakKeyDictionary()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its committer or store: what it keeps per client is made anew."""
        return (DirectRequests, (self.on_reply,))

    async def send(self, fs: Any, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """``fs``'s client's ``method`` (s3fs's name: ``put_object``) with ``params``, or
        ``None`` where the request must go the client's way (``fs._call_s3``): not
        served here, or its one attempt here did not end in a final answer."""
        client = await fs.get_s3(params.get("Bucket"))
        state = self._state(client)
        operation = client.meta.method_to_api_mapping.get(method)
        if state is None or operation not in SERVED or self._hooked(client, state, operation):
            return None
        if str(params.get("Bucket", "")).startswith("arn:"):  # access points: signed apart
            return None
        body = params.get("Body")
        if body is not None and not _served_body(body):
            return None
        try:
            kwargs = fs._get_s3_method_kwargs(getattr(client, method), **params)
            return await self._send(client, state, operation, kwargs)
        except (TypeError, AttributeError) as changed:
            # Not an answer of the store's: an internal here whose signature or result
            # changed (or an event handler's bug, which the client's way raises again).
            # This client's requests go the client's way from now on.
            self._clients[client] = None
            log.warning(
                "S3 requests go the client's way: botocore %s / aiobotocore %s differ "
                "from what magicfs's direct way expects (%s: %s)",
                _version("botocore"),
                _version("aiobotocore"),
                type(changed).__name__,
                changed,
            )
            return None
        except Exception as error:  # a final answer, or an event handler's: as s3fs raises it
            from s3fs.core import S3_RETRYABLE_ERRORS
            from s3fs.errors import translate_boto_error

            if isinstance(error, S3_RETRYABLE_ERRORS) and getattr(fs, "retries", 1) > 1:
                return None  # s3fs would send it again (this was its first): the client's way
            translated = translate_boto_error(error)
            if translated is error:  # not the store's answer: as it is, as s3fs raises it
                raise
            raise translated from error

    def _state(self, client: Any) -> _Client | None:
        try:
            return self._clients[client]
        except KeyError:
            pass
        state = None
        endpoint = getattr(client, "_endpoint", None)
        if all(hasattr(client, name) for name in INTERNALS) and all(
            hasattr(endpoint, name) for name in ENDPOINT_INTERNALS
        ):
            try:
                state = _Client(user_agent=str(client._user_agent_creator.to_string()))
            except (TypeError, AttributeError):  # changed: the client's way
                state = None
        self._clients[client] = state
        return state

    def _hooked(self, client: Any, state: _Client, operation: str) -> bool:
        emitter = getattr(client.meta.events, "_emitter", None)
        handlers = getattr(emitter, "_handlers", None)
        cache = getattr(emitter, "_lookup_cache", None)
        if handlers is None or cache is None:
            return True
        if state.seen is not cache:
            state.hooked.clear()
            state.seen = cache
        hooked = state.hooked.get(operation)
        if hooked is None:
            service = client.meta.service_model.service_id.hyphenize()
            hooked = state.hooked[operation] = any(
                not _module(handler).startswith(OWN_MODULES)
                and getattr(handler, "func", None) is not show_reply
                for event in REPLACED_EVENTS
                for handler in handlers.prefix_search(f"{event}.{service}.{operation}")
            )
        return hooked

    async def _route(
        self,
        client: Any,
        state: _Client,
        model: Any,
        params: dict[str, Any],
        context: dict[str, Any],
    ) -> _Route | None:
        key = (model.name, params.get("Bucket", ""))
        if key not in state.routes:
            resolving = dict(context)
            url, headers, properties = await client._resolve_endpoint_ruleset(
                model, params, resolving
            )
            signing = resolving.get("signing", {})
            auth_type = str(resolving.get("auth_type"))
            plain = (
                auth_type in ("v4", "s3v4")  # botocore's choose-signer: "s3v4" for S3
                and signing.get("signing_name", "s3") == "s3"
                and client._request_signer._signature_version in ("s3v4", "v4")
                and client._request_signer._credentials is not None
                and getattr(client.meta.config, "auth_scheme_preference", None) is None
            )
            state.routes[key] = (
                _Route(url, dict(headers), properties, signing, auth_type) if plain else None
            )
        return state.routes[key]

    async def _send(
        self, client: Any, state: _Client, operation: str, params: dict[str, Any]
    ) -> dict[str, Any] | None:
        from botocore.httpchecksum import resolve_checksum_context

        model = client._service_model.operation_model(operation)
        context = {  # as the client's _make_api_call starts it
            "client_region": client.meta.region_name,
            "client_config": client.meta.config,
            "has_streaming_input": model.has_streaming_input,
            "auth_type": model.resolved_auth_type,
            "unsigned_payload": model.unsigned_payload,
            "auth_options": client._service_model.metadata.get("auth"),
        }
        params = await client._emit_api_params(
            api_params=params, operation_model=model, context=context
        )
        route = await self._route(client, state, model, params, context)
        if route is None:
            return None
        context["auth_type"] = route.auth_type
        context["signing"] = dict(route.signing)
        if route.properties:
            context["endpoint_properties"] = route.properties
        request_dict = await client._convert_to_request_dict(
            api_params=params,
            operation_model=model,
            endpoint_url=route.url,
            context=context,
            headers=dict(route.headers),
            set_user_agent_header=False,
        )
        request_dict["headers"]["User-Agent"] = state.user_agent
        resolve_checksum_context(request_dict, model, params)
        service = client.meta.service_model.service_id.hyphenize()
        _, answered = await client.meta.events.emit_until_response(
            f"before-call.{service}.{operation}",
            model=model,
            params=request_dict,
            request_signer=client._request_signer,
            context=context,
        )
        if answered is not None:
            http, parsed = answered
        else:
            key = (operation, params.get("Bucket", ""))
            settled = await self._settle(client, state, (key, route), request_dict, model, context)
            if settled is None:
                return None
            http, parsed = settled
        await client.meta.events.emit(
            f"after-call.{service}.{operation}",
            http_response=http,
            parsed=parsed,
            model=model,
            context=context,
        )
        return self._answer(client, http, parsed, operation)

    async def _settle(
        self,
        client: Any,
        state: _Client,
        route: tuple[tuple[str, str], _Route],
        request_dict: Any,
        model: Any,
        context: dict[str, Any],
    ) -> tuple[Any, dict[str, Any]] | None:
        """One attempt, and what the client would make of it: the answer and its parsed
        reply (a success, or an error botocore does not send again), or ``None`` where
        botocore would send it again (after the back-off it chose): the client's way. A
        failure to send that botocore would not repeat is raised. ``route``: the route's
        key (operation, bucket) and the route the request is sent by."""
        key, way = route
        http, parsed, error = await self._attempt(client, request_dict, model, context, way)
        if http is not None and (http.status_code < 300 or http.status_code in FINAL):
            self.on_reply(response=(http, parsed))
            return http, parsed
        # botocore's needs-retry event, as after each attempt: the retry handler (this
        # attempt its first), the region redirects and the reply watch see it
        answer = (http, parsed) if http is not None else None
        if await client._endpoint._needs_retry(1, model, request_dict, answer, error):
            self.handed_back += 1
            state.routes.pop(key, None)  # resolved again next time (a redirect may follow)
            return None
        if error is not None:
            service = client.meta.service_model.service_id.hyphenize()
            await client.meta.events.emit(
                f"after-call-error.{service}.{model.name}", exception=error, context=context
            )
            raise error
        return http, parsed

    async def _sign(self, client: Any, request: Any, route: _Route) -> None:
        signer = client._request_signer
        auth = signer.get_auth_instance(
            signing_name=route.signing.get("signing_name", "s3"),
            region_name=route.signing.get("region", client.meta.region_name),
            signature_version="s3v4",
        )
        if inspect.isawaitable(auth):
            auth = await auth
        known = getattr(request.body, "sha256", None)
        hashes = getattr(auth, "payload", None)
        check = getattr(auth, "_should_sha256_sign_payload", None)
        if known is not None and hashes is not None and check is not None:
            # botocore's own decision (plain HTTP, the s3 config's payload signing, a
            # checksum header over HTTPS); the hash it would compute, computed beforehand.
            # With awscrt installed (botocore[crt]) S3 is signed by CrtS3SigV4Auth, which
            # has no ``payload`` and hashes the body itself: it is left to do so.
            position = request.body.tell()
            auth.payload = lambda r: known if check(r) and position == 0 else hashes(r)
        auth.add_auth(request)

    async def _attempt(
        self, client: Any, request_dict: Any, model: Any, context: dict[str, Any], route: _Route
    ) -> tuple[Any, dict[str, Any], Exception | None]:
        """One attempt through the client's endpoint: the answer and parsed reply, or
        ``(None, {}, error)`` if nothing came back."""
        from botocore.awsrequest import create_request_object
        from botocore.httpchecksum import apply_request_checksum

        apply_request_checksum(request_dict)
        request = create_request_object(request_dict)
        request.stream_output = model.has_streaming_output
        await self._sign(client, request, route)
        prepared = client._endpoint.prepare_request(request)  # header values as bytes
        answer, error = await client._endpoint._do_get_response(prepared, model, context)
        if answer is None:
            log.debug("%s: %s", model.name, error)
            return None, {}, error
        http, parsed = answer
        # As botocore's needs-retry handler does: a status changed while parsing (S3's
        # error inside a 200 answer, found by the before-parse handler) is the status.
        http.status_code = parsed.get("ResponseMetadata", {}).get(
            "HTTPStatusCode", http.status_code
        )
        return http, parsed, None

    def _answer(
        self, client: Any, http: Any, parsed: dict[str, Any], operation: str
    ) -> dict[str, Any]:
        """The parsed answer, or its error raised as the client raises it: a final one
        (404, 412, 416), one botocore would not send again, or any answer of a
        ``before-call`` handler (botocore does not retry those either)."""
        self.sent += 1
        if http.status_code < 300:
            return parsed
        code = parsed.get("Error", {}).get("Code")
        raise client.exceptions.from_code(code)(parsed, operation)
