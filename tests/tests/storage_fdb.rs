//! The storage conformance suite against FoundationDB. Compiled with `--features fdb` (which
//! needs libfdb_c to link) and run against the cluster that `FDB_CLUSTER_FILE` names.
#![cfg(feature = "fdb")]

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
