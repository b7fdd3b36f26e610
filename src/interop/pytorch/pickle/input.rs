//! Reading the pickle's bytes: every length is checked against what is left of the input
//! before anything is taken.

use super::machine::Machine;
use super::{Fault, Node, fault};

impl Machine<'_> {
    pub(super) fn take(&mut self, n: usize) -> Result<&[u8], Fault> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.input.len())
            .ok_or_else(|| {
                fault(format!(
                    "{n} bytes announced, {} left",
                    self.input.len() - self.at
                ))
            })?;
        let bytes = &self.input[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    pub(super) fn byte(&mut self) -> Result<u8, Fault> {
        Ok(self.take(1)?[0])
    }

    pub(super) fn le<const N: usize>(&mut self) -> Result<[u8; N], Fault> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A length of `N` little-endian bytes, checked against what is left.
    pub(super) fn len<const N: usize>(&mut self) -> Result<usize, Fault> {
        let mut wide = [0u8; 8];
        wide[..N].copy_from_slice(&self.le::<N>()?);
        let n = u64::from_le_bytes(wide);
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.input.len() - self.at)
            .ok_or_else(|| fault(format!("a length of {n} bytes, past the end of the pickle")))
    }

    pub(super) fn line(&mut self) -> Result<String, Fault> {
        let rest = &self.input[self.at..];
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| fault("a GLOBAL without its newline"))?;
        let text = std::str::from_utf8(&rest[..end])
            .map_err(|_| fault("a GLOBAL name that is not UTF-8"))?
            .to_string();
        self.at += end + 1;
        Ok(text)
    }

    /// A string node of `n` bytes of the input, counted before it is copied.
    pub(super) fn text(&mut self, n: usize) -> Result<Node, Fault> {
        self.charge(n)?;
        let bytes = self.take(n)?;
        std::str::from_utf8(bytes)
            .map(|s| Node::Str(s.into()))
            .map_err(|_| fault("a string that is not UTF-8"))
    }
}
