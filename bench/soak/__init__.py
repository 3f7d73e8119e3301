"""The soak: the whole deployment one host holds, under training load, for a stated time,
with faults on a seeded schedule; ``python -m bench.soak --minutes N --seed S``.

``bench.soak.deploy`` starts the servers (a private PostgreSQL, moto S3 behind the
latency proxy, two catalog replicas, three Flight servers on 127.0.0.21-23 with their
own tiers), ``bench.soak.client`` is one training client (its journal checks every
batch against the plan's schedule and is its saved state), ``bench.soak.faults`` the
faults and their schedule, ``bench.soak.run`` the run, ``bench.soak.figures`` what it
measured. docs/operations.md ("Soak") keeps the figures of a documented run.
"""

__all__: list[str] = []
