//! The throwaway PostgreSQL server and the COMMIT-cutting, round-trip
//! counting proxy of the tests: the `hotcount-pgtemp` workspace crate
//! (`pgtemp/`), shared with the load generator's tests and runs.
#![allow(unused_imports)]

pub use hotcount_pgtemp::*;
