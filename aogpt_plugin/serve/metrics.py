"""`GET /metrics`: the server's counters in Prometheus' text format (prometheus-client), one registry per server.

aogpt_requests_total{outcome}      completion requests by outcome: ok, client_error, server_error,
                                   cancelled (the client left), rejected (queue full, draining)
aogpt_prompt_tokens_total, aogpt_generated_tokens_total
aogpt_queue_depth                  samples waiting for a slot
aogpt_slots, aogpt_slots_busy      the engine's slots, and those holding a sample
aogpt_steps_total, aogpt_busy_slot_steps_total
                                   steps run, and the samples that took part in them: their ratio over
                                   aogpt_slots is the slot occupancy (`aogpt bench serve` reports it)
aogpt_step_seconds                 a histogram of step times
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

OUTCOMES = ("ok", "client_error", "server_error", "cancelled", "rejected")


class Metrics:
    def __init__(self, slots: int):
        self.registry = registry = CollectorRegistry()
        self.requests = Counter("aogpt_requests", "completion requests by outcome", ["outcome"], registry=registry)
        for outcome in OUTCOMES:
            self.requests.labels(outcome)
        self.prompt_tokens = Counter("aogpt_prompt_tokens", "prompt tokens of the requests", registry=registry)
        self.generated_tokens = Counter("aogpt_generated_tokens", "tokens generated", registry=registry)
        self.queue_depth = Gauge("aogpt_queue_depth", "samples waiting for a slot", registry=registry)
        Gauge("aogpt_slots", "the engine's slots", registry=registry).set(slots)
        self.slots_busy = Gauge("aogpt_slots_busy", "slots holding a sample", registry=registry)
        self.steps = Counter("aogpt_steps", "engine steps run", registry=registry)
        self.busy_slot_steps = Counter(
            "aogpt_busy_slot_steps", "samples that took part in the steps", registry=registry
        )
        buckets = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
        self.step_seconds = Histogram("aogpt_step_seconds", "engine step time", buckets=buckets, registry=registry)

    def step(self, ran: int, busy: int, queued: int, seconds: float) -> None:
        """One engine step (the worker's thread): `ran` samples took part (0: it only let cancelled ones go),
        `busy` slots hold one after it."""
        self.slots_busy.set(busy)
        self.queue_depth.set(queued)
        if ran:
            self.steps.inc()
            self.busy_slot_steps.inc(ran)
            self.step_seconds.observe(seconds)

    def text(self) -> bytes:
        return generate_latest(self.registry)
