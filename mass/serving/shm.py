"""System shared memory between a job and the Triton server on its host.

A client thread owns one :class:`ShmSlot`: two regions (all inputs, the output) registered
with the server under its access header (:mod:`mass.serving.access`). Regions are created new
(never an existing one: ``create_only``), mode 0600 (Python's ``SharedMemory``), named
``mass-shm-<pid>-<16 random hex>-in|out``: unpredictable, while the pid lets a later client
drop what a killed one left behind (:func:`clear_stale_regions`).
"""

from __future__ import annotations

import glob
import os
import secrets

SHM_PREFIX = "mass-shm"


def pow2(n: int) -> int:
    """Region size for ``n`` bytes: the next power of two, at least 64 KiB."""
    return 1 << max(16, int(n - 1).bit_length())


class ShmSlot:
    """Two system shared-memory regions (all inputs, the output) registered with the server."""

    def __init__(self, client, in_size: int, out_size: int, headers=None) -> None:
        import tritonclient.utils.shared_memory as shm

        tag = f"{SHM_PREFIX}-{os.getpid()}-{secrets.token_hex(8)}"
        self.in_name, self.out_name = f"{tag}-in", f"{tag}-out"
        self.in_size, self.out_size = in_size, out_size
        self.in_h = shm.create_shared_memory_region(
            self.in_name, f"/{self.in_name}", in_size, create_only=True
        )
        try:
            self.out_h = shm.create_shared_memory_region(
                self.out_name, f"/{self.out_name}", out_size, create_only=True
            )
        except Exception:
            shm.destroy_shared_memory_region(self.in_h)
            raise
        self.open = True
        try:
            self.register(client, headers)
        except Exception:
            self.close(None)  # never leave an unregistered region behind
            raise

    def register(self, client, headers=None) -> None:
        for name, size in ((self.in_name, self.in_size), (self.out_name, self.out_size)):
            try:
                client.unregister_system_shared_memory(name, headers=headers)
            except Exception:  # not registered (new region, or a restarted server)
                pass
            client.register_system_shared_memory(name, f"/{name}", size, headers=headers)

    def close(self, client, headers=None) -> None:
        import tritonclient.utils.shared_memory as shm

        if not self.open:
            return
        self.open = False
        for name, h in ((self.in_name, self.in_h), (self.out_name, self.out_h)):
            if client is not None:
                try:
                    client.unregister_system_shared_memory(name, headers=headers)
                except Exception:  # the server may be gone; the region is ours to remove
                    pass
            shm.destroy_shared_memory_region(h)


def clear_stale_regions(client, headers=None) -> None:
    """Unregister and unlink regions of dead processes (a killed job cannot clean up)."""
    from mass.scratch import pid_alive

    dead = set()
    for path in glob.glob(f"/dev/shm/{SHM_PREFIX}-*"):
        pid = os.path.basename(path).split("-")[2]
        if pid.isdigit() and not pid_alive(int(pid)):
            dead.add(os.path.basename(path))
    try:
        status = client.get_system_shared_memory_status(as_json=True, headers=headers)
        status = status.get("regions", {})
        dead |= {n for n in status if n.startswith(SHM_PREFIX)
                 and not pid_alive(int(n.split("-")[2]))}  # fmt: skip
    except Exception:
        pass
    for name in dead:
        try:
            client.unregister_system_shared_memory(name, headers=headers)
        except Exception:
            pass
        try:
            os.unlink(f"/dev/shm/{name}")
        except OSError:
            pass
