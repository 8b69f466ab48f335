"""``podium serve --certs self``: the cluster keeps podium's serving certificate, no person and
no cert-manager needed (`webhook.certs.selfmanaged` decides; this module reads and writes).

Every replica, every ``interval`` seconds, reads the Secret and, when it holds a serving pair that
is not the one being served, writes it to its private directory and has the
`webhook.serve.tls.CertReloader` load it at once (new handshakes get it; open connections keep
theirs). Until the Secret holds a pair, a replica serves a throw-away self-signed one and
``/readyz`` waits for the ``serving certificate``.

The leader, in the same round, decides from the Secret and the webhook configuration what to do
(issue, renew, stage / promote / drop a CA, re-issue for new names, a rotation asked for by
annotation), writes the Secret under the resourceVersion it decided from, and then copies the
Secret's ``ca.crt`` into ``caBundle`` of every webhook of the configuration (also when something
else changed it: a ``helm upgrade``, a person). Both writes go through `webhook.serve.writer`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography import x509

from webhook import certs
from webhook.certs import selfmanaged
from webhook.core.objects import Obj
from webhook.kube import errors
from webhook.kube.protocols import Objects
from webhook.serve import tls, writer

log = logging.getLogger("podium.certs")

SECRET_API = ("v1", "Secret")
WEBHOOK_API = ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")
DEFAULT_INTERVAL = 5.0
#: What /readyz says it waits for until the Secret's pair is served.
PENDING = "serving certificate"
#: ... and when the Secret has not been read for too long (see `CertKeeper.ready`).
STALE = "serving certificate (the Secret could not be read lately)"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """Where the certificate lives and what it must say (``podium serve --certs self``)."""

    namespace: str
    secret: str = certs.SECRET_NAME
    webhook_configuration: str = certs.WEBHOOK_CONFIG
    service: str = "podium"
    #: More names for the serving certificate (a URL-registered webhook's host, say).
    sans: tuple[str, ...] = ()
    directory: Path | None = None
    interval: float = DEFAULT_INTERVAL
    leaf_lifetime: datetime.timedelta = certs.DEFAULT_LEAF_LIFETIME
    ca_lifetime: datetime.timedelta = certs.DEFAULT_CA_LIFETIME
    min_overlap: datetime.timedelta = selfmanaged.DEFAULT_SELF_OVERLAP

    def policy(self) -> selfmanaged.Policy:
        names = certs.serving_names(self.service, self.namespace)
        # The apiserver dials <service>.<namespace>.svc: it names the certificate.
        ordered = [names[2], *(n for n in names if n != names[2])]
        extra = [s for s in self.sans if s not in ordered]
        return selfmanaged.Policy(
            names=(*ordered, *extra),
            leaf_lifetime=self.leaf_lifetime,
            ca_lifetime=self.ca_lifetime,
            min_overlap=self.min_overlap,
        )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class CertKeeper:
    """One replica's part: `sync` (every replica) and `lead` (the leader only), run by `run`."""

    def __init__(
        self,
        api: Objects,
        options: Options,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], datetime.datetime] = _now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.monotonic = monotonic
        self.options = options
        self.policy = options.policy()
        self.is_leader = is_leader
        self.clock = clock
        if options.directory is not None:
            options.directory.mkdir(parents=True, exist_ok=True)
            self.directory = options.directory
        else:
            self.directory = Path(tempfile.mkdtemp(prefix="podium-certs-"))
        self.cert_file = self.directory / "tls.crt"
        self.key_file = self.directory / "tls.key"
        self.reloader: tls.CertReloader | None = None
        #: The serial of the Secret's leaf last written to the files (None: a placeholder).
        self._written: int | None = None
        #: When the Secret was last read (monotonic seconds).
        self._read_at: float | None = None
        #: A replica that has not read the Secret for this long stops being ready: the leader
        #: drops an old CA `min_overlap` after the new certificate went into the Secret, so a
        #: replica still ready then has read it (and serves it) well before.
        self.stale_after = max(options.min_overlap.total_seconds() / 2, 3 * options.interval)

    # -- every replica ------------------------------------------------------------------------

    def prepare(self, secret: Obj | None) -> None:
        """Before serving: the Secret's pair in the files, or a throw-away self-signed one."""
        if secret is not None and self._write(secret):
            return
        placeholder = certs.issue_ca(
            "podium-placeholder", lifetime=datetime.timedelta(days=1), now=self.clock()
        )
        leaf = certs.issue_leaf(
            placeholder,
            subject=placeholder.cert.subject,
            sans=certs.parse_sans(self.policy.names),
            lifetime=datetime.timedelta(days=1),
            now=self.clock(),
        )
        certs.atomic_write(self.key_file, leaf.key_pem(), mode=certs.KEY_MODE)
        certs.atomic_write(self.cert_file, leaf.cert_pem())

    async def read_secret(self) -> Obj | None:
        """The Secret, or None when there is none."""
        try:
            found = await self.api.get(*SECRET_API, self.options.namespace, self.options.secret)
        except errors.NotFound:
            found = None
        self._read_at = self.monotonic()
        return found

    def _fresh(self) -> bool:
        return self._read_at is not None and self.monotonic() - self._read_at < self.stale_after

    def _serving(self) -> bool:
        return (
            self._written is not None
            and self.reloader is not None
            and self.reloader.serial == self._written
        )

    def ready(self) -> bool:
        """The Secret's pair is what this replica serves, and the Secret was read lately (so the
        apiserver, which calls only ready replicas through the Service, never reaches one still
        serving a certificate of a CA that left the bundle)."""
        return self._serving() and self._fresh()

    def pending(self) -> Sequence[str]:
        if not self._serving():
            return (PENDING,)
        return () if self._fresh() else (STALE,)

    def _write(self, secret: Obj) -> bool:
        """Put the Secret's serving pair in the files when it is not the one there; whether the
        files now hold the Secret's pair."""
        try:
            pair = selfmanaged.serving_pair(_data(secret))
        except certs.CertError:
            return False
        if pair.cert.serial_number == self._written:
            return True
        # Key first: the reloader skips the mismatched pair in between (see write_state).
        certs.atomic_write(self.key_file, pair.key_pem(), mode=certs.KEY_MODE)
        certs.atomic_write(self.cert_file, pair.cert_pem())
        self._written = pair.cert.serial_number
        return True

    async def sync(self, secret: Obj | None = None) -> None:
        """Serve what the Secret holds (read now unless given)."""
        if secret is None:
            secret = await self.read_secret()
        if secret is not None and self._write(secret) and self.reloader is not None:
            self.reloader.check_once()

    # -- the leader ---------------------------------------------------------------------------

    async def lead(self) -> Obj | None:
        """One round of the leader: decide, write the Secret, inject its bundle. The Secret as
        it is after the round (None when there is none and it could not be created)."""
        secret = await self.read_secret()
        data = _data(secret) if secret is not None else {}
        annotations = _annotations(secret) if secret is not None else {}
        state, problem = _state(data)
        config = await self._read_config()
        trust = _trust(config) if config is not None else None
        asked = selfmanaged.rotation_requested(annotations)
        now = self.clock()
        decision = selfmanaged.decide(
            state,
            now=now,
            policy=self.policy,
            trust=trust,
            problem=problem,
            rotate_requested=asked is not None,
        )
        for warning in decision.plan.warnings:  # (this round's injection settles them)
            log.debug("certificates: %s", warning)
        trusted = [ca for bundle in (trust.bundles.values() if trust else ()) for ca in bundle]
        after = selfmanaged.carry_out(state, decision, now=now, policy=self.policy, trusted=trusted)
        injected = False
        if after is not None:
            if decision.issue and config is not None:
                # A new CA: trusted before anything it signs is served (replicas may read the
                # Secret any moment after it is written).
                await self._inject(config, after.bundle)
                injected = True
            secret = await self._write_secret(secret, after, asked if decision.rotate else None)
            log.info("certificates: %s", _what(decision))
        if secret is not None and config is not None and not injected:
            await self._inject(config, selfmanaged.bundle_of(_data(secret)))
        return secret

    async def _read_config(self) -> Obj | None:
        try:
            return await self.api.get(*WEBHOOK_API, "", self.options.webhook_configuration)
        except errors.NotFound:
            log.warning(
                "certificates: MutatingWebhookConfiguration %s not found: no caBundle to keep",
                self.options.webhook_configuration,
            )
            return None

    async def _write_secret(
        self, secret: Obj | None, state: certs.CertState, rotated: str | None
    ) -> Obj:
        """The Secret with ``state``, replaced under the resourceVersion decided from (created
        when there was none)."""
        namespace, name = self.options.namespace, self.options.secret
        meta: dict[str, Any] = dict((secret or {}).get("metadata") or {})
        meta.update(name=name, namespace=namespace)
        labels = dict(meta.get("labels") or {})
        labels.setdefault("app.kubernetes.io/name", "podium")
        meta["labels"] = labels
        if rotated is not None:
            meta["annotations"] = {
                **(meta.get("annotations") or {}),
                selfmanaged.ROTATED_ANNOTATION: rotated,
            }
        manifest: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": (secret or {}).get("type") or "kubernetes.io/tls",
            "metadata": meta,
            "data": selfmanaged.secret_data(state),
        }
        if secret is None:
            meta.pop("resourceVersion", None)
            await writer.create(self.api, manifest)
        else:
            await writer.replace(self.api, manifest)
        return manifest

    async def _inject(self, config: Obj, bundle: Sequence[x509.Certificate]) -> None:
        """Every webhook's ``caBundle`` := the Secret's ``ca.crt`` (when it is not already)."""
        if not bundle:
            return
        encoded = base64.b64encode(certs.certs_to_pem(bundle)).decode("ascii")
        hooks = [dict(h) for h in config.get("webhooks") or [] if isinstance(h, Mapping)]
        if all((h.get("clientConfig") or {}).get("caBundle") == encoded for h in hooks):
            return
        for hook in hooks:
            hook["clientConfig"] = {**(hook.get("clientConfig") or {}), "caBundle": encoded}
        api_version, kind = WEBHOOK_API
        meta = {**(config.get("metadata") or {}), "namespace": ""}
        manifest = {**config, "apiVersion": api_version, "kind": kind, "metadata": meta}
        await writer.replace(self.api, {**manifest, "webhooks": hooks})
        log.info(
            "certificates: caBundle of %s set to %d CA(s)",
            self.options.webhook_configuration,
            len(bundle),
        )

    # -- the loop -----------------------------------------------------------------------------

    async def step(self) -> None:
        """One round: the leader's part when leading, then every replica's."""
        secret = await self.lead() if self.is_leader() else None
        await self.sync(secret)

    async def run(self, stop: asyncio.Event) -> None:
        """`step` every ``interval`` seconds until ``stop``; a failed round is logged."""
        while not stop.is_set():
            try:
                await self.step()
            except errors.Conflict:
                log.info("certificates: the Secret changed meanwhile; next round")
            except errors.ApiError as err:  # forbidden, unreachable: one line, not a traceback
                log.warning("certificates: %s; next round", err)
            except Exception:
                log.exception("certificates round failed")
            # Until the Secret's pair is served, look again soon: leadership may come any moment
            # and the first admissions wait for this.
            wait = self.options.interval if self._serving() else min(self.options.interval, 0.5)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)


def _data(secret: Obj) -> Mapping[str, object]:
    data = secret.get("data")
    return data if isinstance(data, Mapping) else {}


def _annotations(secret: Obj) -> Mapping[str, object]:
    meta = secret.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def _state(data: Mapping[str, object]) -> tuple[certs.CertState | None, str]:
    try:
        return selfmanaged.state_from_secret(data), ""
    except certs.CertError as error:
        return None, str(error)


def _trust(config: Obj) -> certs.ClusterTrust:
    """The CAs each webhook of the configuration trusts."""
    bundles: dict[str, tuple[x509.Certificate, ...]] = {}
    for hook in config.get("webhooks") or []:
        if not isinstance(hook, Mapping):
            continue
        encoded = (hook.get("clientConfig") or {}).get("caBundle") or ""
        try:
            pem = base64.b64decode(encoded)
            bundles[str(hook.get("name"))] = tuple(certs.certs_from_pem(pem)) if pem.strip() else ()
        except (ValueError, certs.CertError):
            bundles[str(hook.get("name"))] = ()
    return certs.ClusterTrust(bundles)


def _what(decision: selfmanaged.Decision) -> str:
    if decision.issue:
        return f"issued a new CA and serving certificate ({decision.reason})"
    done = [str(a) for a in decision.plan.actions]
    if decision.rotate:
        done.append("stage-ca (asked for)")
    if decision.reshape:
        done.append("renew-leaf (new names)")
    return ", ".join(done)
