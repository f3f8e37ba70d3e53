"""Files: atomic writes, strict JSON reading and writing, hashes."""
