"""The reconciler: carries ``webhook.core.reconcile.plan`` out while this replica leads.

Every ``reconcile-interval-seconds`` the leader (``leader.LeaderElector``) lists podium's objects
(``Owned``: records, and policies of the policy mode's kind, fresh with their resourceVersions),
plans from them and the view (``webhook.core.reconcile``, pure: what to create, repair, mark,
unmark, delete, label or unlabel, and why), and carries out each action through podium's writer
(``webhook.serve.writer``): every write guarded by the resourceVersion (or UID) it was planned
from, a delete for a gone job only once the apiserver, not just the cache, says the job is gone
(``kept: the job exists`` otherwise). Each action is audited (``outcome: reconcile``, ``result``
the writer's word: ``conflict`` when the object changed since it was listed — the next pass
decides again — ``failed: <error>`` on any other API error, counted in
``podium_write_failures_total{source="reconciler"}``). Metrics: ``podium_gangs_split``,
``podium_reconcile_passes_total``, ``podium_reconcile_last_pass_timestamp_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from webhook.core import audit, labels, policies
from webhook.core.audit import EffectOutcome
from webhook.core.objects import Obj, metadata_of
from webhook.core.reconcile import Action, Owned, Tuning, plan, split_gangs
from webhook.core.settings import PolicyMode
from webhook.kube import errors
from webhook.serve import loops, writer

log = logging.getLogger("podium.reconciler")

#: What a merge patch did, by the action's verb.
PATCHED = {
    "repair": EffectOutcome.REPAIRED,
    "mark": EffectOutcome.MARKED,
    "unmark": EffectOutcome.UNMARKED,
    "unlabel": EffectOutcome.UNLABELLED,
    "label": EffectOutcome.LABELLED,
}


def _policy_kinds(mode: PolicyMode) -> list[tuple[str, str]]:
    kind = policies.policy_kind(mode)
    return [kind] if kind else []


@dataclasses.dataclass(kw_only=True, eq=False)
class Reconciler(loops.LeaderPass):
    """Runs ``plan`` and carries it out while this replica leads and the cache has synced."""

    tuning: Tuning = dataclasses.field(default_factory=Tuning)

    async def list_owned(self) -> Owned:
        """podium's records and policies: across all namespaces, or with writable-namespaces
        (RBAC that lets podium read them there only) in each of those."""
        managed = f"{labels.MANAGED_BY}={labels.MANAGER}"
        where: list[str | None] = [*sorted(self.settings.writable_namespaces)] or [None]
        decisions: list[Obj] = []
        found: list[Obj] = []
        for namespace in where:
            decisions += await self.api.list(
                policies.RECORD_API_VERSION,
                policies.RECORD_KIND,
                namespace=namespace,
                label_selector=f"{managed},{labels.COMPONENT}=decision",
            )
            for api_version, kind in _policy_kinds(self.settings.policy_mode):
                with contextlib.suppress(errors.NotFound):  # the CRD is not installed
                    found.extend(
                        await self.api.list(
                            api_version,
                            kind,
                            namespace=namespace,
                            label_selector=f"{managed},{labels.COMPONENT}=policy",
                        )
                    )
        return Owned(decisions=decisions, policies=found)

    async def run_once(self) -> list[audit.AuditEntry]:
        """One pass; the audit entries of what it did. Nothing when not leading or not synced."""
        if not self.acting():
            return []
        owned = await self.list_owned()
        now = self.clock()
        view = self.view()
        actions = plan(view, self.settings, owned=owned, now=now, tuning=self.tuning)
        entries = [await self.execute(action, now=now) for action in actions]
        if self.meter is not None:
            self.meter.gangs_split.set(len(split_gangs(view)))
            self.meter.reconcile_passes.inc()
            self.meter.reconcile_last_pass.set(now.timestamp())
        return entries

    async def execute(self, action: Action, *, now: datetime) -> audit.AuditEntry:
        started = time.perf_counter()
        error = None
        try:
            outcome = await self._carry_out(action)
        except errors.Conflict:  # changed since it was listed: the next pass decides again
            outcome = EffectOutcome.CONFLICT
        except errors.ApiError as err:
            outcome, error = EffectOutcome.FAILED, str(err)
            if self.meter is not None:
                self.meter.write_failures.labels(source="reconciler").inc()
        entry = self.write(self._audit(action, outcome, error, now=now, started=started))
        log.info("reconcile %s %s %s: %s", action.verb, *action.target[::2], entry.get("result"))
        return entry

    async def _carry_out(self, action: Action) -> EffectOutcome:
        """Through podium's writer: create, patch (repair, mark, unmark, label, unlabel) or
        delete — a delete for a gone job only once the apiserver, not just the cache, says the
        job is gone."""
        if action.verb == "create":
            written = await writer.create(self.api, action.manifest, optional=True)
        elif action.patch is not None:
            done = PATCHED[action.verb]
            written = await writer.merge_patch(self.api, action.manifest, action.patch, done=done)
        elif action.reason == "job-gone" and await self._job_lives(action.owner, action.target[1]):
            return EffectOutcome.KEPT
        else:
            written = await writer.delete(self.api, action.manifest)
        return written.outcome

    async def _job_lives(self, owner: Mapping[str, Any], namespace: str) -> bool:
        """Before deleting for a gone job, ask the apiserver rather than trust the cache."""
        if not owner.get("kind") or not owner.get("name"):
            return False
        try:
            job = await self.api.get(
                str(owner.get("apiVersion")), str(owner["kind"]), namespace, str(owner["name"])
            )
        except errors.NotFound:
            return False
        return bool(metadata_of(job).get("uid") == owner.get("uid"))

    def _audit(
        self,
        action: Action,
        outcome: EffectOutcome,
        error: str | None,
        *,
        now: datetime,
        started: float,
    ) -> audit.AuditEntry:
        owner = action.owner
        return audit.reconciled(
            time=now,
            latency_ms=(time.perf_counter() - started) * 1000,
            action=action.verb,
            reason=action.reason,
            detail=action.detail,
            target=action.target,
            job={
                "kind": str(owner.get("kind") or ""),
                "name": str(owner.get("name") or ""),
                "uid": str(owner.get("uid") or ""),
                "gang": action.gang,
            },
            outcome=outcome,
            error=error,
        )

    async def run(self, stop: asyncio.Event) -> None:
        """A pass every ``interval_seconds`` until ``stop``; a failed pass is logged, not fatal."""
        await loops.every(
            self.tuning.interval_seconds, self.run_once, stop, what="reconcile pass", log=log
        )
