"""Fake sysfs/proc trees and fake NVML modules for the topology tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_plugin.simulated.hardware import (
    FakeNvml,
    build_mig_proc,
    build_sysfs,
    dgx_like_gpus,
    dgx_like_pci,
    mig_box_gpus,
    pcie_box_gpus,
    pcie_box_pci,
)


@pytest.fixture
def dgx_sysfs(tmp_path: Path) -> Path:
    return build_sysfs(tmp_path / "sys", nodes=2, cores_per_node=8, threads=2, pci=dgx_like_pci())


@pytest.fixture
def pcie_sysfs(tmp_path: Path) -> Path:
    return build_sysfs(tmp_path / "sys", nodes=2, cores_per_node=4, threads=2, pci=pcie_box_pci())


@pytest.fixture
def dgx_nvml() -> FakeNvml:
    return FakeNvml(dgx_like_gpus())


@pytest.fixture
def pcie_nvml() -> FakeNvml:
    return FakeNvml(pcie_box_gpus())


@pytest.fixture
def mig_nvml() -> FakeNvml:
    return FakeNvml(mig_box_gpus())


@pytest.fixture
def mig_proc(tmp_path: Path) -> Path:
    return build_mig_proc(tmp_path / "proc", 0, mig_box_gpus()[0].migs)
