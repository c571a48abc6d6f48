"""Whole-GPU jobs that leave part of their GPUs to slices (``allow_mixed_nodes`` / ``colocate``), and
turning the cell core's preempted list into the real jobs to requeue."""

from __future__ import annotations

from collections.abc import Mapping

from hivebatch.sharing.booking import LedgerBase
from hivebatch.sharing.memory import SHARD_MIB, shard_rounded_mib
from hivebatch.sharing.slices import KIND_SHARE, KIND_WHOLE, SHARE_PREFIX, GpuShare, cell_id, is_synthetic


class WholeJobs(LedgerBase):
    def _shareable(self, vc: str, node: str) -> bool:
        return self.config.mixed(node) or self.config.colocate.allowed(vc, node)

    def whole_job_reserve_mib(
        self, vc: str, placement: Mapping[str, list[int]], declared_mib: int | None
    ) -> int | None:
        """Memory per GPU a guaranteed whole-GPU job keeps when the rest may be shared, else None
        (then it takes its GPUs whole and Slurm gets ``gpu:gN:1``)."""
        if not self.config.enabled or declared_mib is None or not placement:
            return None
        if not all(self._shareable(vc, n) for n in placement):
            return None
        # Slurm 22.05 grants a job shards of one GPU per node only (``shard:g2:20,shard:g5:20`` runs on
        # GPU 2 alone), so only jobs with one GPU per node can hold their GPU as shards.
        if any(len(gpus) != 1 for gpus in placement.values()):
            return None
        caps = {self.node_capacity_mib(n) for n in placement}
        if None in caps or len(caps) != 1:
            return None
        cap = caps.pop() or 0
        reserve = shard_rounded_mib(declared_mib)
        return reserve if reserve < cap else None

    def whole_job_gres(self, vc: str, placement: Mapping[str, list[int]], declared_mib: int | None) -> str:
        """The per-node gres for a whole-GPU job: its shards where it shares its GPUs, else whole GPUs."""
        gpus = sorted(next(iter(placement.values()))) if placement else []
        reserve = self.whole_job_reserve_mib(vc, placement, declared_mib)
        if reserve is None:
            return ",".join(f"gpu:g{i}:1" for i in gpus)
        return ",".join(f"shard:g{i}:{reserve // SHARD_MIB}" for i in gpus)

    def note_whole_job(
        self,
        job_id: str,
        vc: str,
        priority: int,
        placement: Mapping[str, list[int]],
        declared_mib: int | None,
    ) -> bool:
        """Record a placed guaranteed whole-GPU job; True when its GPUs are open to slices."""
        reserve = self.whole_job_reserve_mib(vc, placement, declared_mib)
        if reserve is None or priority < 0:
            return False
        self._whole[job_id] = {
            "vc": vc,
            "priority": priority,
            "placement": {n: list(g) for n, g in placement.items()},
            "reserve": reserve,
        }
        for node, gpus in placement.items():
            cap = self.node_capacity_mib(node) or 0
            for gpu in gpus:
                self._share(node, gpu, cap, KIND_WHOLE, job_id, vc, priority).reserve_mib = reserve
        return True

    def release_whole_job(self, job_id: str) -> list[str]:
        """A noted whole-GPU job left (after the cell core released it). Its GPUs' slices stay where the
        cell core still has the GPU free — guaranteed slices as a share cell of their VC, opportunistic
        ones as an opportunistic cell — else they are returned for requeueing."""
        info = self._whole.pop(job_id, None)
        if info is None:
            return []
        out: list[str] = []
        for node, gpus in info["placement"].items():
            for gpu in gpus:
                g = self._gpus.get((node, gpu))
                if g is None or g.holder != job_id:
                    continue
                g.reserve_mib = 0
                if any(not s.opportunistic for s in g.slices.values()):
                    out += self._keep_guaranteed(g, info["vc"])
                else:
                    out += self._rehome_opportunistic(g)
        return out

    def _keep_guaranteed(self, g: GpuShare, vc: str) -> list[str]:
        """The GPU's guaranteed slices keep it as a share cell of their VC when the cell core still has
        it free (opportunistic slices stay where co-location allows); what cannot stay is returned."""
        guaranteed = [s for s in g.slices.values() if not s.opportunistic]
        cell = cell_id(SHARE_PREFIX, g.node, g.gpu)
        prio = min(s.priority for s in guaranteed)
        d = self.alloc.adopt(cell, vc, prio, {g.node: [g.gpu]})
        out: list[str] = []
        if d.result == "placed":
            g.kind, g.holder, g.priority = KIND_SHARE, cell, prio
            if not self.config.colocate.allowed(g.vc, g.node):
                for s in g.opp_slices():
                    self._drop_slice(s.job_id)
                    out.append(s.job_id)
            return out
        for s in list(g.slices.values()):
            self._drop_slice(s.job_id)
            out.append(s.job_id)
        del self._gpus[(g.node, g.gpu)]
        return out

    def translate_preempted(self, job_ids: list[str]) -> list[str]:
        """Turn the cell core's ``preempted`` list into the real jobs to requeue: a synthetic share cell
        stands for the slices on its GPU; a noted whole job takes its co-located slices with it."""
        out: list[str] = []
        for jid in job_ids:
            if is_synthetic(jid):
                key = next((k for k, g in self._gpus.items() if g.holder == jid), None)
                if key is None:
                    continue
                g = self._gpus.pop(key)
                for s in g.slices.values():
                    self._slices.pop(s.job_id, None)
                    out.append(s.job_id)
            else:
                out.append(jid)
                if jid in self._whole:
                    out += self.release_whole_job(jid)
        seen: set[str] = set()
        return [j for j in out if not (j in seen or seen.add(j))]  # type: ignore[func-returns-value]
