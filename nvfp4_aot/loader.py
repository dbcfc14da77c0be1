"""Read the manifest, verify cubins and load baked kernels on a device.

* :func:`load_manifest` reads and validates ``manifest.json`` once per artifacts
  directory.
* :func:`variants_for` keeps the variants whose compute capability equals the device's
  exactly ('a' targets such as sm_90a or sm_100a run on that one capability only),
  by family, fewest groups first. Which family a plan runs is
  :func:`nvfp4_aot.selection.choose_family`'s choice, and the plan splits its groups
  over that family's baked group counts.
* :func:`read_cubin` reads a cubin (plain, or from its family's xz pack as the wheel
  ships it, :mod:`nvfp4_aot.cubin_pack`) and checks
  its size, sha256 and ELF arch before the driver sees it: the driver accepts an sm_100a
  cubin on an sm_90 GPU and only later reports that it holds no kernels.
* :func:`load_kernel` loads a variant (``cuLibraryLoadData`` -> ``cuLibraryGetKernel``
  -> ``cuKernelGetFunction`` in the device's primary context), checks its parameters
  against ``cuFuncGetParamInfo`` and sets its function attributes, once per (artifacts
  directory, device, variant), under a lock, on first use.
"""

from __future__ import annotations

import hashlib
import lzma
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path

from . import driver
from .cubin import cubin_sm
from .cubin_pack import pack_name, read_pack
from .errors import ArtifactError, CudaError, UnsupportedDeviceError
from .manifest import (
    GEMM_ROLES,
    ORIGINAL_EPILOGUE,
    ROLE_GEMM,
    Epilogue,
    Manifest,
    Variant,
    read_manifest,
)
from .packing import ParamPacker
from .paths import artifacts_dir

_lock = threading.RLock()
_manifests: dict[Path, Manifest] = {}
_kernels: dict[tuple[Path, int, str], LoadedKernel] = {}


@dataclass(frozen=True, eq=False)
class LoadedKernel:
    """A variant loaded on one device, ready to launch."""

    variant: Variant
    device: int
    library: object
    kernel: object
    function: object
    packer: ParamPacker


def resolve_dir(directory: str | Path | None = None) -> Path:
    return (Path(directory) if directory is not None else artifacts_dir()).resolve()


def load_manifest(directory: str | Path | None = None) -> Manifest:
    """The validated manifest of ``directory`` (default: :func:`paths.artifacts_dir`)."""
    path = resolve_dir(directory)
    with _lock:
        manifest = _manifests.get(path)
        if manifest is None:
            manifest = read_manifest(path)
            _manifests[path] = manifest
        return manifest


def clear_caches() -> None:
    """Forget cached manifests and loaded kernels (libraries are not unloaded)."""
    with _lock:
        _manifests.clear()
        _kernels.clear()
        _packs.clear()


def baked_archs(manifest: Manifest) -> str:
    archs = sorted({(v.arch, v.compute_capability) for v in manifest.variants})
    if not archs:
        return "none"
    return ", ".join(f"{arch} (compute capability {cc[0]}.{cc[1]})" for arch, cc in archs)


def variants_for(
    manifest: Manifest,
    capability: tuple[int, int],
    device: int | None = None,
    role: str | None = ROLE_GEMM,
    epilogue: Epilogue | None = ORIGINAL_EPILOGUE,
) -> list[Variant]:
    """Variants of ``role`` (None: any) that run on ``capability``, by family, fewest
    groups first; grouped GEMMs with ``epilogue`` only (None: any epilogue).

    Raises
    ------
    UnsupportedDeviceError
        Naming the capability, the device ordinal (where given) and every baked arch.
    """
    capability = tuple(capability)
    found = [
        v
        for v in manifest.variants
        if tuple(v.compute_capability) == capability and role in (None, v.role)
    ]
    if found and epilogue is not None:
        fitting = [v for v in found if v.role not in GEMM_ROLES or v.epilogue == epilogue]
        if not fitting:
            raise UnsupportedDeviceError(
                f"no kernel baked for compute capability {capability[0]}.{capability[1]} "
                f"writes {epilogue}; the artifacts hold "
                f"{', '.join(sorted({str(v.epilogue) for v in found}))}. Rebake with "
                "build_kernels.py"
            )
        found = fitting
    if not found:
        where = "" if device is None else f"device {device}: "
        raise UnsupportedDeviceError(
            f"{where}no baked kernel runs on a device of compute capability "
            f"{capability[0]}.{capability[1]}; the artifacts hold {baked_archs(manifest)}. "
            "Use a GPU of one of these architectures or bake a variant for this one"
        )
    return sorted(found, key=lambda v: (v.family, v.num_groups))


_packs: dict[tuple[Path, int, int], dict[str, bytes]] = {}  # (pack, mtime, size) -> cubins


def _packed_cubin(pack: Path, name: str) -> bytes:
    """Cubin ``name`` from its family's pack (the wheel's form, :mod:`.cubin_pack`), each
    pack decompressed once while its file stays the same."""
    stat = pack.stat()
    key = (pack, stat.st_mtime_ns, stat.st_size)
    with _lock:
        cubins = _packs.get(key)
        if cubins is None:
            try:
                cubins = read_pack(pack)
            except (lzma.LZMAError, tarfile.TarError, EOFError) as exc:
                raise ArtifactError(
                    f"{pack} does not decompress ({exc}): the file is corrupt; reinstall nvfp4-aot"
                ) from exc
            _packs[key] = cubins
    if name not in cubins:
        raise FileNotFoundError(name)
    return cubins[name]


def read_cubin(directory: Path, variant: Variant) -> bytes:
    """The variant's cubin (the plain file, or from its family's pack as the wheel ships
    it) after checking its size, sha256 and ELF arch."""
    plain = Path(directory) / variant.cubin
    pack = plain.with_name(pack_name(variant.cubin))
    packed = not plain.exists() and pack.exists()
    path = f"{pack} ({variant.cubin})" if packed else str(plain)  # named in every message
    try:
        data = _packed_cubin(pack, variant.cubin) if packed else plain.read_bytes()
    except FileNotFoundError as exc:
        raise ArtifactError(
            f"{path} is missing although the manifest names it; rebake the artifacts "
            "with `python build_kernels.py` or reinstall nvfp4-aot"
        ) from exc
    except OSError as exc:
        raise ArtifactError(
            f"{path} cannot be read ({exc}); rebake the artifacts with "
            "`python build_kernels.py` or reinstall nvfp4-aot"
        ) from exc
    if len(data) != variant.cubin_bytes:
        raise ArtifactError(
            f"{path} holds {len(data)} bytes, the manifest says {variant.cubin_bytes}: "
            "the file is truncated or replaced; rebake or reinstall the artifacts"
        )
    digest = hashlib.sha256(data).hexdigest()
    if digest != variant.sha256:
        raise ArtifactError(
            f"{path} has sha256 {digest}, the manifest says {variant.sha256}: the file is "
            "corrupt or from another bake; rebake or reinstall the artifacts"
        )
    try:
        sm = cubin_sm(data)
    except ArtifactError as exc:
        raise ArtifactError(f"{path}: {exc}; rebake the artifacts or reinstall nvfp4-aot") from exc
    expected = variant.compute_capability[0] * 10 + variant.compute_capability[1]
    if sm != expected:
        raise ArtifactError(
            f"{path} is compiled for sm_{sm}, but the manifest lists it as {variant.arch} "
            f"(compute capability {variant.compute_capability[0]}."
            f"{variant.compute_capability[1]}); the artifacts are inconsistent, rebake them"
        )
    return data


def device_capability(device: int) -> tuple[int, int]:
    count = driver.device_count()
    if not 0 <= device < count:
        raise UnsupportedDeviceError(f"device {device} does not exist; this machine has {count}")
    return driver.compute_capability(device)


def load_kernel(variant: Variant, device: int, directory: str | Path | None = None) -> LoadedKernel:
    """Load ``variant`` on ``device`` once and return the cached handles."""
    path = resolve_dir(directory)
    key = (path, device, variant.name)
    loaded = _kernels.get(key)
    if loaded is not None:
        return loaded
    with _lock:
        loaded = _kernels.get(key)
        if loaded is None:
            loaded = _load(path, variant, device)
            _kernels[key] = loaded
        return loaded


def _load(directory: Path, variant: Variant, device: int) -> LoadedKernel:
    capability = device_capability(device)
    if tuple(variant.compute_capability) != capability:
        raise UnsupportedDeviceError(
            f"{variant.name} is built for {variant.arch}, device {device} has compute "
            f"capability {capability[0]}.{capability[1]}"
        )
    image = read_cubin(directory, variant)
    smem_limit = driver.device_attribute(driver.ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device)
    if variant.dynamic_smem_bytes > smem_limit:
        raise UnsupportedDeviceError(
            f"{variant.name} needs {variant.dynamic_smem_bytes} bytes of shared memory per "
            f"block, device {device} allows {smem_limit}"
        )
    driver.activate(device)
    library = driver.library_load_data(image)
    try:
        try:
            kernel = driver.library_get_kernel(library, variant.kernel_symbol)
        except CudaError as exc:
            if exc.result_name != "CUDA_ERROR_NOT_FOUND":
                raise
            raise ArtifactError(
                f"{directory / variant.cubin} has no kernel {variant.kernel_symbol}; the "
                "manifest and the cubin disagree, rebake with `python build_kernels.py`"
            ) from exc
        function = driver.kernel_get_function(kernel)
        _check_params(variant, driver.function_param_info(function, len(variant.params)))
        for attribute in variant.function_attributes:
            value = attribute.value
            if value is None:
                value = driver.device_attribute(attribute.from_device_attribute, device)
            driver.function_set_attribute(function, attribute.id, value)
    except BaseException:
        driver.library_unload(library)
        raise
    return LoadedKernel(variant, device, library, kernel, function, ParamPacker(variant))


def _check_params(variant: Variant, info: list[tuple[int, int]] | None) -> None:
    """Refuse a kernel whose parameters differ from what the manifest packs."""
    if info is None:  # the driver cannot tell; the build cross-checked PTX and .nv.info
        return
    expected = [(p.offset, p.size) for p in variant.params]
    if info != expected:
        raise ArtifactError(
            f"{variant.name}: the driver reports kernel parameters (offset, size) {info}, "
            f"the manifest packs {expected}; refusing to launch, rebake the artifacts"
        )
