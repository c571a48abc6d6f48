"""An in-memory Slurm for unit tests that answers like the lab (same states, reasons and refusals).

It is a real alternative backend, not a mock: it keeps a consistent cluster state, applies the same
permission rules as Slurm with accounting (owners vs. Operators, admin holds), and reproduces the lab's
quirks that hivebatch must live with (re-typing a typed GRES keeps the old GPUs too; a NodeList longer
than the node count leaves the job in BadConstraints).

Driving it from a test::

    fake = FakeSlurm()                                  # node1..node4 × 8 GPUs, 32 shards each
    jid = fake.as_user("alice").submit("#!/bin/sh\\n", ["--hold", "-A", "cv"])
    fake.as_user("hbctl").update_pending(jid, ["node2"], 1, "gpu:g3:1,gpu:g5:1")
    fake.as_user("hbctl").release(jid)                  # starts at once (auto_schedule=True)
    fake.job(jid).gpus                                  # {"node2": [3, 5]}
    fake.finish(jid)  /  fake.fail(jid, exit_code=2)    # → COMPLETED / FAILED
    fake.set_node_state("node3", "DRAIN", "fan")        # sinfo shows it bad; "IDLE" resumes it
    fake.advance(60)                                    # the fake clock moves on

``auto_schedule=False`` leaves released jobs PENDING until ``fake.schedule()`` or ``fake.start(jid)``.

Like the lab (preempt/qos, PreemptMode=REQUEUE), a job of another QOS that only fits on GPUs held by
``opportunistic`` jobs requeues them: they go back to PENDING with reason ``BeginTime`` and may start again
after REQUEUE_DELAY_S (also after a requeue-hold). Finished jobs leave ``list_jobs`` MIN_JOB_AGE_S after
their end (``history`` keeps them).
"""

from hivebatch.testing.fake_slurm.backend import FakeSlurm
from hivebatch.testing.fake_slurm.state import QOS_NAMES

__all__ = ["FakeSlurm", "QOS_NAMES"]
