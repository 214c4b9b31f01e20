//! The storage conformance suite against FoundationDB. Compiled with `--features fdb` (which
//! needs libfdb_c to link) and run against the cluster that `FDB_CLUSTER_FILE` names; with the
//! feature and without the variable the suite fails, it does not skip.
//!
//! Without the feature (the default build, and `.ci/test`) the suite is not built, and the
//! one test here says so by its name and its output instead of passing in silence: it runs
//! the same conformance checks against SQLite's in-memory store, so it can still fail.

#[cfg(feature = "fdb")]
mod fdb {
    fn open_fdb() -> (engram_storage::Store, ()) {
        let cluster_file = std::env::var_os("FDB_CLUSTER_FILE")
            .expect("the fdb suite runs against the cluster named by FDB_CLUSTER_FILE; set it");
        let options = engram_storage::fdb::FdbOptions {
            cluster_file: Some(cluster_file.into()),
            ..Default::default()
        };
        (
            engram_storage::Store::fdb(options).expect("connect to FoundationDB"),
            (),
        )
    }

    engram_tests::storage_conformance!(open_fdb());
}

#[cfg(not(feature = "fdb"))]
#[test]
fn foundationdb_suite_not_run_built_without_the_fdb_feature() {
    println!(
        "foundationdb suite not run: this build lacks the `fdb` feature (run \
         `cargo test -p engram-tests --features fdb --test storage_fdb` with FDB_CLUSTER_FILE \
         naming a cluster); its {} checks ran against SQLite's in-memory store instead",
        engram_tests::storage_suite::CHECKS.len()
    );
    assert!(!engram_tests::storage_suite::CHECKS.is_empty());
    let store = engram_storage::Store::in_memory().unwrap();
    for (name, check) in engram_tests::storage_suite::CHECKS {
        println!("ok {name}");
        check(&store, b"fdb-absent/");
    }
}
