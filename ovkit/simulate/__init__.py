"""Simulated OpenVINO device sets (GPU and NPU paths without the hardware), clearly labelled."""

from __future__ import annotations

from ovkit.simulate.core import SimulatedCore, UnknownProfileError, get_profile
from ovkit.simulate.profiles import PROFILES, DeviceProfile, Failure, Profile

__all__ = [
    "PROFILES",
    "DeviceProfile",
    "Failure",
    "Profile",
    "SimulatedCore",
    "UnknownProfileError",
    "get_profile",
]
