//! [`PackStore`] as burn-store's [`ModuleStore`]: what `save_into` / `load_from` call.

use std::collections::BTreeMap;

use burn::store::burn_pack::Tensor as StoreTensor;
use burn::store::{ApplyResult, IdentityAdapter, ModuleAdapter, ModuleSnapshot, ModuleStore};

use super::{EXTENSION, Mode, PackStore, StoreError};
use crate::write::{WriteError, Writer};

impl ModuleStore for PackStore {
    type Error = StoreError;

    fn collect_from<M: ModuleSnapshot>(&mut self, module: &M) -> Result<(), StoreError> {
        if let Mode::Source(source) = &self.mode {
            return Err(StoreError::ReadOnly(source.file().to_string()));
        }
        self.cache = None;
        let mut options = self.options.clone();
        for (k, v) in &self.metadata {
            options = options.metadata(k.clone(), v.clone());
        }
        let writer: Writer = options.configure(Writer::new(self.entries(module)?));
        match &mut self.mode {
            Mode::File(path) => {
                let path = if self.auto_extension && path.extension().is_none() {
                    path.with_extension(EXTENSION)
                } else {
                    path.clone()
                };
                // The writer refuses an existing file without overwrite (the one check); the
                // store says so in its own words, as `BurnpackStore` does.
                writer.write_to_file(&path).map_err(|e| match e {
                    WriteError::AlreadyExists { path } => StoreError::AlreadyExists(path),
                    e => e.into(),
                })?;
            }
            Mode::Bytes(bytes) => *bytes = Some(writer.into_bytes()?),
            Mode::Source(_) => unreachable!("refused above"),
        }
        Ok(())
    }

    fn apply_to<M: ModuleSnapshot>(&mut self, module: &mut M) -> Result<ApplyResult, StoreError> {
        let tensors: Vec<StoreTensor> = self.tensors()?.values().cloned().collect();
        let adapter: Box<dyn ModuleAdapter> = match &self.from_adapter {
            Some(adapter) => adapter.clone(),
            None => Box::new(IdentityAdapter),
        };
        let result = module.apply(tensors, self.filter.clone(), Some(adapter), false);
        if self.validate && !result.errors.is_empty() {
            return Err(StoreError::Validation {
                file: self.source_name(),
                message: format!("Import errors: {:?}", result.errors),
            });
        }
        if !self.allow_partial && !result.missing.is_empty() {
            let mut message = format!("Missing tensors: {:?}", result.missing);
            // A tensor the source lists but cannot hand out (FP8 in safetensors) is named
            // with why, rather than reported as absent.
            let source = self.open()?;
            for withheld in source.withheld() {
                if result
                    .missing
                    .iter()
                    .any(|(path, _)| *path == withheld.name)
                {
                    message.push_str("; ");
                    message.push_str(&withheld.error(source.file()).to_string());
                }
            }
            return Err(StoreError::Validation {
                file: self.source_name(),
                message,
            });
        }
        Ok(result)
    }

    fn get_tensor(&mut self, name: &str) -> Result<Option<&StoreTensor>, StoreError> {
        Ok(self.tensors()?.get(name))
    }

    fn get_all_tensors(&mut self) -> Result<&BTreeMap<String, StoreTensor>, StoreError> {
        self.tensors()
    }

    fn keys(&mut self) -> Result<Vec<String>, StoreError> {
        Ok(self.tensors()?.keys().cloned().collect())
    }
}
