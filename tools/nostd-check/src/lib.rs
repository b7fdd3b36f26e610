//! What a `no_std` firmware does with burnpack: a pack compiled into the program
//! (`include_pack!`, aligned), validated with `format::PackSlice`, a tensor read and checked
//! against its checksum, no allocation beyond the table. `.ci/run` type-checks it for
//! `thumbv7em-none-eabihf` (Cortex-M4F); `cargo test` here runs it on the host.
#![no_std]

use burnpack::format::{FormatError, Limits, PackSlice};

/// The model: the same pack the WebAssembly tests embed.
static MODEL: &[u8] = burnpack::include_pack!("../../web-tests/tiny.bpk");

/// The sum of the model's `scale` parameter, read from the program's own memory.
///
/// # Errors
/// What is wrong with the embedded pack.
pub fn scale_sum() -> Result<f32, FormatError> {
    let pack = PackSlice::new(MODEL, &Limits::default())?;
    let Some(scale) = pack.tensor("scale") else {
        return Err(FormatError::Metadata {
            reason: "no tensor 'scale'".into(),
        });
    };
    let bytes = pack.checked(scale)?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .sum())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_embedded_pack_reads_without_std() {
        assert_eq!(super::scale_sum().unwrap(), 4.5);
    }
}
