//! Where the rows go: the [`Sink`] trait (the real emulator's CSV writer
//! is [`crate::output::CsvSink`]), a sink that keeps them in memory (tests)
//! and one that drops them (no `stats.dir`).

use super::{IntervalRow, PacketRecord};

/// Where rows go.
pub trait Sink: Send {
    fn packet(&mut self, rec: PacketRecord);
    fn intervals(&mut self, rows: Vec<IntervalRow>);
    /// Flush and close (called once, at the end).
    fn finish(&mut self) {}
}

/// Keeps everything in memory (tests).
#[derive(Default)]
pub struct MemorySink {
    pub packets: std::sync::Arc<std::sync::Mutex<Vec<PacketRecord>>>,
    pub rows: std::sync::Arc<std::sync::Mutex<Vec<IntervalRow>>>,
}

impl Sink for MemorySink {
    fn packet(&mut self, rec: PacketRecord) {
        self.packets.lock().unwrap().push(rec);
    }
    fn intervals(&mut self, rows: Vec<IntervalRow>) {
        self.rows.lock().unwrap().extend(rows);
    }
}

/// Drops everything (no stats.dir configured).
pub struct NullSink;

impl Sink for NullSink {
    fn packet(&mut self, _rec: PacketRecord) {}
    fn intervals(&mut self, _rows: Vec<IntervalRow>) {}
}
