//! Nothing here: the tests are in `tests/`. See README.md.
