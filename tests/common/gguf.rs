//! GGUF files built byte by byte, in llama.cpp's layout (v3, key/values, a tensor table, a
//! 32-aligned data section), for tests of damaged and hostile files.

/// A GGUF v3 file of `tensors` (name, dims fastest first, ggml type id, offset in the data
/// section), the metadata `kv` (already encoded, `kv_count` entries) and `data`.
pub fn file(
    tensors: &[(&str, &[u64], u32, u64)],
    data: &[u8],
    kv: &[u8],
    kv_count: u64,
) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend(kv_count.to_le_bytes());
    out.extend(kv);
    for (name, dims, ty, offset) in tensors {
        out.extend((name.len() as u64).to_le_bytes());
        out.extend(name.as_bytes());
        out.extend((dims.len() as u32).to_le_bytes());
        for d in *dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(ty.to_le_bytes());
        out.extend(offset.to_le_bytes());
    }
    while !out.len().is_multiple_of(32) {
        out.push(0);
    }
    out.extend(data);
    out
}

/// One metadata entry: its key, GGUF value type and encoded value.
pub fn key(name: &str, ty: u32, value: &[u8]) -> Vec<u8> {
    let mut out = (name.len() as u64).to_le_bytes().to_vec();
    out.extend(name.as_bytes());
    out.extend(ty.to_le_bytes());
    out.extend(value);
    out
}

/// A GGUF string value.
pub fn string(s: &str) -> Vec<u8> {
    [&(s.len() as u64).to_le_bytes()[..], s.as_bytes()].concat()
}
