//! engram-server's integration tests, one binary: each of these modules
//! once linked all of tonic, tantivy, candle and sqlx on its own (~90 MB
//! apiece, a gigabyte of CI's disk and a minute of linking). nextest still
//! runs every test in a process of its own.

mod common;

mod agents;
mod ahead;
mod blocks;
mod chaos;
mod compaction;
mod compaction_binary;
mod compaction_log;
mod compaction_races;
mod console;
mod consolidate;
mod context;
mod crash;
mod forget;
mod grpc;
mod hostile;
mod json_api;
mod mcp;
mod memories;
mod metrics;
mod overload;
mod pg_faults;
mod portable;
mod recall;
mod replicas;
mod search;
mod security;
mod semantic;
mod snip;
mod storage_faults;
mod strategies;
mod tenancy;
mod truth;
mod usage;
mod users;
