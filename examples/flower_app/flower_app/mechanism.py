"""The public constants both sides declare (the clients enforce them; the server accounts them)."""

from ampfl.integrations.flower import CheckInMechanism

MECHANISM = CheckInMechanism(clip=1.0, noise_multiplier=1.0, participation=0.5, num_clients=3)
