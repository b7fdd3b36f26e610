//! llama.cpp's naming and layout as a [`Convention`]: the second value of the loader's one
//! mechanism for a format's rules (after `PyTorch`'s).

use std::borrow::Cow;

use regex::Regex;

use crate::format::TensorInfo;
use crate::source::{Convention, DimOrder, ParamPlace};

/// llama.cpp's tensor names (`token_embd.weight`, `blk.N.attn_q.weight`, ...) and layout, as
/// a [`Convention`] for [`LoadOptions::convention`](crate::module::LoadOptions::convention).
///
/// - **Names**: each rule renames a GGUF name (a regex and its replacement, `$1` for a group);
///   [`llama`](Self::llama) holds the rules of the llama architecture into the names of
///   Burn's llama models (`tok_embeddings`, `layers.N.attention.wq`, `feed_forward.w1`,
///   `attention_norm.gamma`, `norm`, `output`), and [`rename`](Self::rename) adds one.
/// - **Layout**: ggml stores a linear layer's weight as `[out, in]` rows (GGUF dimensions
///   `[in, out]`, fastest first); Burn's `Linear` holds `[in, out]`: a 2-D `weight` of a
///   `Linear` is read with its dimensions reversed, a view on backends that transpose by
///   strides. Embeddings (`[vocab, dim]`) and norms are as stored.
///
/// ```
/// use burnpack::interop::gguf::LlamaCppConvention;
/// use burnpack::source::Convention;
/// let llama = LlamaCppConvention::llama();
/// assert_eq!(llama.source_name("blk.3.attn_q.weight"), "layers.3.attention.wq.weight");
/// assert_eq!(llama.source_name("output_norm.weight"), "norm.gamma");
/// let mine = LlamaCppConvention::new().rename(r"^blk\.(\d+)\.", "block.$1.").unwrap();
/// assert_eq!(mine.source_name("blk.0.ffn_up.weight"), "block.0.ffn_up.weight");
/// ```
#[derive(Debug, Clone, Default)]
pub struct LlamaCppConvention {
    rules: Vec<(Regex, String)>,
}

/// The llama architecture's tensors, into the names of Burn's llama models.
const LLAMA: &[(&str, &str)] = &[
    (r"^token_embd\.weight$", "tok_embeddings.weight"),
    (
        r"^blk\.(\d+)\.attn_norm\.weight$",
        "layers.$1.attention_norm.gamma",
    ),
    (
        r"^blk\.(\d+)\.attn_q\.weight$",
        "layers.$1.attention.wq.weight",
    ),
    (
        r"^blk\.(\d+)\.attn_k\.weight$",
        "layers.$1.attention.wk.weight",
    ),
    (
        r"^blk\.(\d+)\.attn_v\.weight$",
        "layers.$1.attention.wv.weight",
    ),
    (
        r"^blk\.(\d+)\.attn_output\.weight$",
        "layers.$1.attention.wo.weight",
    ),
    (
        r"^blk\.(\d+)\.ffn_norm\.weight$",
        "layers.$1.ffn_norm.gamma",
    ),
    (
        r"^blk\.(\d+)\.ffn_gate\.weight$",
        "layers.$1.feed_forward.w1.weight",
    ),
    (
        r"^blk\.(\d+)\.ffn_down\.weight$",
        "layers.$1.feed_forward.w2.weight",
    ),
    (
        r"^blk\.(\d+)\.ffn_up\.weight$",
        "layers.$1.feed_forward.w3.weight",
    ),
    (r"^output_norm\.weight$", "norm.gamma"),
];

impl LlamaCppConvention {
    /// ggml's layout and no renaming (GGUF names as they are).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// ggml's layout and the llama architecture's names into those of Burn's llama models.
    ///
    /// # Panics
    /// Never: the table's patterns are valid (a test compiles each).
    #[must_use]
    pub fn llama() -> Self {
        LLAMA.iter().fold(Self::new(), |c, (pattern, to)| {
            c.rename(pattern, to)
                .expect("the table's patterns are valid")
        })
    }

    /// Adds a renaming rule: a GGUF name that `pattern` matches is renamed to `replacement`
    /// (the first rule that matches applies).
    ///
    /// # Errors
    /// The pattern is not a valid regex.
    pub fn rename(mut self, pattern: &str, replacement: &str) -> Result<Self, regex::Error> {
        self.rules
            .push((Regex::new(pattern)?, replacement.to_string()));
        Ok(self)
    }
}

impl Convention for LlamaCppConvention {
    fn source_name<'n>(&self, name: &'n str) -> Cow<'n, str> {
        for (pattern, replacement) in &self.rules {
            if pattern.is_match(name) {
                return Cow::Owned(pattern.replace(name, replacement.as_str()).into_owned());
            }
        }
        Cow::Borrowed(name)
    }

    fn dim_order(&self, param: &ParamPlace<'_>, _tensor: &TensorInfo) -> DimOrder {
        if param.rank() == 2 && param.leaf() == "weight" && param.module() == "Struct:Linear" {
            DimOrder::Reversed
        } else {
            DimOrder::AsStored
        }
    }
}
