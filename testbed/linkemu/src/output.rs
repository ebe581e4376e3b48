//! Output files: intervals.csv and packets.csv (streamed by a writer thread),
//! summary.json (written once at the end).
//!
//! The forwarding thread must never block on a disk write (a 1 MB write-back
//! can take milliseconds, far beyond the 200 us delay budget), so records are
//! batched and handed over a channel to a writer thread that formats and
//! writes them.  The writer runs at normal priority: it is created before the
//! forwarding thread raises itself to SCHED_FIFO.  Files appear as soon as the
//! emulator starts (headers only) and are complete when it has exited.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use crate::stats::{IntervalRow, PacketRecord, Sink, INTERVAL_HEADER, PACKET_HEADER};

const BATCH: usize = 4096;

enum Msg {
    Packets(Vec<PacketRecord>),
    Rows(Vec<IntervalRow>),
}

pub struct CsvSink {
    tx: Option<SyncSender<Msg>>,
    batch: Vec<PacketRecord>,
    thread: Option<JoinHandle<Result<(), String>>>,
    dropped_batches: u64,
}

impl CsvSink {
    /// Create `dir`, the CSV files with their headers, and the writer thread.
    pub fn create(dir: &Path, per_packet: bool) -> Result<CsvSink, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let open = |name: &str, header: &str| -> Result<BufWriter<File>, String> {
            let p = dir.join(name);
            let f = File::create(&p).map_err(|e| format!("cannot create {}: {e}", p.display()))?;
            let mut w = BufWriter::with_capacity(1 << 20, f);
            writeln!(w, "{header}").map_err(|e| format!("cannot write {}: {e}", p.display()))?;
            w.flush().map_err(|e| format!("cannot write {}: {e}", p.display()))?;
            Ok(w)
        };
        let intervals = open("intervals.csv", INTERVAL_HEADER)?;
        let packets = if per_packet { Some(open("packets.csv", PACKET_HEADER)?) } else { None };
        // Bounded: if the disk cannot keep up, packet records are dropped (and
        // counted) rather than memory growing without bound or forwarding stalling.
        let (tx, rx) = sync_channel::<Msg>(1024);
        let thread = std::thread::Builder::new()
            .name("linkemu-writer".into())
            .spawn(move || writer(rx, intervals, packets))
            .map_err(|e| format!("cannot start the writer thread: {e}"))?;
        Ok(CsvSink { tx: Some(tx), batch: Vec::with_capacity(BATCH), thread: Some(thread), dropped_batches: 0 })
    }

    fn flush_batch(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let b = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        if let Some(tx) = &self.tx {
            if tx.try_send(Msg::Packets(b)).is_err() {
                self.dropped_batches += 1;
            }
        }
    }
}

fn writer(
    rx: Receiver<Msg>,
    mut intervals: BufWriter<File>,
    mut packets: Option<BufWriter<File>>,
) -> Result<(), String> {
    let mut line = String::with_capacity(1 << 16);
    let mut err: Option<String> = None;
    for msg in rx {
        let r = match msg {
            Msg::Rows(rows) => {
                line.clear();
                for r in rows {
                    line.push_str(&r.csv());
                    line.push('\n');
                }
                intervals.write_all(line.as_bytes()).and_then(|_| intervals.flush())
            }
            Msg::Packets(recs) => match &mut packets {
                Some(w) => {
                    line.clear();
                    for r in &recs {
                        r.csv(&mut line);
                    }
                    w.write_all(line.as_bytes())
                }
                None => Ok(()),
            },
        };
        if let Err(e) = r {
            err.get_or_insert(format!("writing statistics failed: {e}"));
        }
    }
    let mut fin = intervals.flush();
    if let Some(w) = &mut packets {
        fin = fin.and(w.flush());
    }
    if let Err(e) = fin {
        err.get_or_insert(format!("writing statistics failed: {e}"));
    }
    err.map_or(Ok(()), Err)
}

impl Sink for CsvSink {
    fn packet(&mut self, rec: PacketRecord) {
        self.batch.push(rec);
        if self.batch.len() >= BATCH {
            self.flush_batch();
        }
    }

    fn intervals(&mut self, rows: Vec<IntervalRow>) {
        self.flush_batch();
        if let Some(tx) = &self.tx {
            // Interval rows are few: wait for room rather than lose them.
            let _ = tx.send(Msg::Rows(rows));
        }
    }

    fn finish(&mut self) {
        self.flush_batch();
        if let Some(tx) = self.tx.take() {
            drop(tx);
        }
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("linkemu: warning: {e}"),
                Err(_) => eprintln!("linkemu: warning: the statistics writer thread panicked"),
            }
        }
        if self.dropped_batches > 0 {
            eprintln!(
                "linkemu: warning: packets.csv lost {} batches of {BATCH} records (disk too slow)",
                self.dropped_batches
            );
        }
    }
}

impl Drop for CsvSink {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Write `value` as pretty JSON to `dir/summary.json` atomically (tmp + rename).
pub fn write_summary(dir: &Path, value: &serde_json::Value) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join("summary.json");
    let tmp = dir.join(".summary.json.tmp");
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(&tmp, text + "\n").map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}
