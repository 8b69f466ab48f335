"""Whether podium may write its CiliumNetworkPolicy: the installed CRD, watched, said aloud.

Cilium before 1.16 has no ``enableDefaultDeny``; its CRD prunes the field, and podium's allow
policy would put the job's pods into default deny (``policies.withheld``). The watch cache keeps
the ``ciliumnetworkpolicies.cilium.io`` CRD in the view (``cache.CILIUM_CRD``); the engine and the
reconciler read it there for every decision. This loop says so when it matters: once the cache
has synced and again whenever the CRD changes what podium does, it logs a warning (or the all
clear), writes an audit entry (``outcome: guard``) and sets the gauge
``podium_cilium_policy_withheld``. Cheap: one look at the view every few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

from webhook.core import audit, policies
from webhook.core.settings import OldCilium, PolicyMode, Settings
from webhook.core.view import View
from webhook.serve import loops
from webhook.serve.audit import Sink

log = logging.getLogger("podium.guard")

#: ``additive``: the CRD knows enableDefaultDeny; ``old``: it does not (Cilium < 1.16);
#: ``absent``: no such CRD (no Cilium, or not readable), so there is nothing to decide from.
State = Literal["additive", "old", "absent"]


def crd_state(view: View) -> State:
    crd = view.get(policies.CRD_API_VERSION, policies.CRD_KIND, "", policies.CILIUM_CRD)
    if crd is None:
        return "absent"
    return "additive" if policies.knows_default_deny(crd) else "old"


class CiliumGuard:
    """Reports what the installed CiliumNetworkPolicy CRD means for podium's policies."""

    def __init__(
        self,
        *,
        view: Callable[[], View],
        ready: Callable[[], bool],
        settings: Settings,
        sink: Sink,
        interval: float = 5.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.view = view
        self.ready = ready
        self.settings = settings
        self.sink = sink
        self.interval = interval
        self.clock = clock
        self.state: State | None = None

    @property
    def withholding(self) -> bool:
        """podium writes no CiliumNetworkPolicy now (gauge ``podium_cilium_policy_withheld``)."""
        return (
            self.state == "old"
            and self.settings.policy_mode is PolicyMode.CILIUM
            and self.settings.old_cilium is OldCilium.SKIP_POLICY
        )

    def check(self) -> audit.AuditEntry | None:
        """Look at the view once; the audit entry written when the state changed."""
        if not self.ready():
            return None
        state = crd_state(self.view())
        if state == self.state:
            return None
        first, self.state = self.state is None, state
        if state == "absent" and first:
            log.info("no %s CRD: Cilium is not installed (or not readable)", policies.CILIUM_CRD)
            return None
        if state == "old" and self.settings.policy_mode is PolicyMode.CILIUM:
            reason = "cilium-crd-without-enable-default-deny"
            if self.withholding:
                detail = policies.OLD_CILIUM_WARNING
            else:
                detail = (
                    f"the installed {policies.CILIUM_CRD} CRD has no enableDefaultDeny "
                    "(Cilium < 1.16) and old-cilium is create-policy: podium's policies put the "
                    "jobs' pods into default deny"
                )
            log.warning("%s", detail)
        else:
            reason = f"cilium-crd-{state}"
            detail = {
                "additive": f"the installed {policies.CILIUM_CRD} CRD knows enableDefaultDeny: "
                "podium's policies are additive",
                "old": f"the installed {policies.CILIUM_CRD} CRD has no enableDefaultDeny "
                f"(Cilium < 1.16); policy mode {self.settings.policy_mode} does not depend on it",
                "absent": f"the {policies.CILIUM_CRD} CRD is gone",
            }[state]
            log.info("%s", detail)
        warnings = [detail] if self.withholding else []
        entry = audit.guarded(time=self.clock(), reason=reason, detail=detail, warnings=warnings)
        with contextlib.suppress(Exception):  # an audit sink failure must not end the loop
            self.sink.write(entry)
        return entry

    async def run(self, stop: asyncio.Event) -> None:
        """``check`` every ``interval`` seconds until ``stop``."""
        await loops.every(self.interval, self.check, stop, what="checking the Cilium CRD", log=log)
