"""What the recorder needs of SGLang's ``ExpertLocationMetadata``, for engines without SGLang."""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class ExpertLocation:
    """Slots and placement: ``physical_to_logical_map[l, p]`` is the logical expert in slot
    ``p`` of layer ``l``. Update the map in place when experts move; the recorder follows."""

    physical_to_logical_map: torch.Tensor  # [L, P] integer
    num_logical_experts: int
    ep_size: int = 1

    @classmethod
    def trivial(cls, num_layers, num_logical_experts, num_physical_experts=None, ep_size=1,
                device="cpu"):
        """Slot p holds expert p % num_logical_experts (SGLang's trivial placement)."""
        num_physical_experts = num_physical_experts or num_logical_experts
        slots = torch.arange(num_physical_experts, device=device) % num_logical_experts
        return cls(slots.repeat(num_layers, 1), num_logical_experts, ep_size)

    @property
    def num_layers(self) -> int:
        return self.physical_to_logical_map.shape[0]

    @property
    def num_physical_experts(self) -> int:
        return self.physical_to_logical_map.shape[1]

    @property
    def num_local_physical_experts(self) -> int:
        return self.num_physical_experts // self.ep_size
