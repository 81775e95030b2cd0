//! CUDA graphs for decode rounds: while a round of few rows is open, launches are recorded instead of issued and
//! sent in segments, each replayed from an executable graph of the same kernel sequence (captured the second time
//! that sequence is seen) with only the nodes whose arguments changed updated. The kernels, their order and their
//! arguments are those the plain launches would have had, so every bit is the same.
//!
//! Stream order is kept by one rule (device.rs): anything but a kernel that writes device memory (an upload, a
//! memset, a copy) first sends the recorded launches, and so does anything that frees device memory to the driver
//! (the driver runs a free at once, ahead of recorded launches that may still use the memory: weights' SendFirst,
//! the pool's excess, the staging caches). Buffers recycled by the pool need no rule: one goes to a later
//! allocation on the same stream, which only kernels recorded after it, or writes made after a send, touch. The
//! round's small host arrays (row tables, token ids, draw descriptions) are staged in one arena instead, uploaded in
//! one copy ahead of the segment that reads them, at addresses that repeat from round to round (so nodes rarely
//! change).

use crate::device::{ok, Arg};
use cudarc::driver::{sys, CudaSlice, CudaStream};
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Bytes of the staging arena; a round's arrays take a few KiB (a window of 64 rows a few tens).
const ARENA_BYTES: usize = 1 << 20;
/// Executable graphs kept (least recently used dropped first), and variants of one kernel sequence.
const MAX_GRAPHS: usize = 128;
const VARIANTS: usize = 3;
/// Launches in a round's first segment: the device waits while the host records it, so it is short.
const FIRST_SEGMENT: usize = 16;

/// One kernel launch, as the driver is given it.
#[derive(Clone, Debug)]
pub struct Launch {
    pub func: sys::CUfunction,
    pub grid: (u32, u32, u32),
    pub block: u32,
    /// Bytes of dynamic shared memory.
    pub smem: u32,
    pub args: Vec<Arg>,
}

impl Launch {
    /// Same grid, block and argument bits (floats compared as bits, so a NaN argument still matches itself).
    fn same_params(&self, o: &Launch) -> bool {
        self.grid == o.grid
            && self.block == o.block
            && self.smem == o.smem
            && self.args.len() == o.args.len()
            && self
                .args
                .iter()
                .zip(&o.args)
                .all(|(a, b)| a.bits() == b.bits())
    }

    /// The driver's kernelParams: pointers into `vals`, which must outlive their use.
    pub fn param_ptrs(vals: &mut [Arg]) -> Vec<*mut c_void> {
        vals.iter_mut()
            .map(|a| match a {
                Arg::P(v) => v as *mut u64 as *mut c_void,
                Arg::I(v) => v as *mut i32 as *mut c_void,
                Arg::F(v) => v as *mut f32 as *mut c_void,
                Arg::D(v) => v as *mut f64 as *mut c_void,
            })
            .collect()
    }
}

/// Counts since the backend started (the bench prints them per round).
#[derive(Clone, Copy, Debug, Default)]
pub struct GraphStats {
    /// Segments sent as a graph launch, and as plain launches (a kernel sequence seen for the first time).
    pub graph_sends: usize,
    pub plain_sends: usize,
    /// Graphs captured and instantiated.
    pub builds: usize,
    /// Nodes whose arguments or grid were updated before a replay.
    pub node_updates: usize,
}

struct Exec {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    /// The kernel nodes in launch order, and the launches they hold now.
    nodes: Vec<sys::CUgraphNode>,
    launches: Vec<Launch>,
    used: u64,
}

impl Exec {
    /// How many of `launches` differ from the nodes' launches.
    fn differing(&self, launches: &[Launch]) -> usize {
        self.launches
            .iter()
            .zip(launches)
            .filter(|(a, b)| !a.same_params(b))
            .count()
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        // SAFETY: both handles were created by this module and are destroyed once, here; a launched graph may
        // still run, which the driver allows (destruction is deferred until it completes).
        unsafe {
            sys::cuGraphExecDestroy(self.exec);
            sys::cuGraphDestroy(self.graph);
        }
    }
}

/// Recording state, behind the device's lock.
pub struct Recorder {
    /// A round is open: launches are recorded.
    pub open: bool,
    /// Launches per segment (a send when reached, so the device starts while the host records the rest): `first`
    /// after a synchronisation, twice as many each send after it, at most `segment`.
    segment: usize,
    limit: usize,
    pending: Vec<Launch>,
    arena_host: Vec<u8>,
    arena: Option<CudaSlice<u8>>,
    /// Bytes of arena_host already uploaded; arena generation (bumped when the arena is reused from its start).
    uploaded: usize,
    pub generation: u64,
    staged: HashMap<Vec<u8>, usize>,
    /// Executable graphs by kernel sequence, a few variants each (see `send`).
    graphs: HashMap<u64, Vec<Exec>>,
    seen: HashSet<u64>,
    tick: u64,
    /// A graph call failed: plain launches from then on (the error is kept for the log).
    pub broken: Option<String>,
    pub stats: GraphStats,
}

// SAFETY: the graph handles are used only under the device's lock, on the device's one stream.
unsafe impl Send for Recorder {}

impl Recorder {
    pub fn new(segment: usize) -> Self {
        Recorder {
            open: false,
            segment: segment.max(1),
            limit: FIRST_SEGMENT.min(segment.max(1)),
            pending: Vec::new(),
            arena_host: Vec::new(),
            arena: None,
            uploaded: 0,
            generation: 0,
            staged: HashMap::new(),
            graphs: HashMap::new(),
            seen: HashSet::new(),
            tick: 0,
            broken: None,
            stats: GraphStats::default(),
        }
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Records a launch; true when the segment is full and should be sent.
    pub fn record(&mut self, l: Launch) -> bool {
        self.pending.push(l);
        self.pending.len() >= self.limit
    }

    /// The device address of `bytes` in the arena (the same bytes staged twice in one round share it), or None when
    /// the arena is full.
    pub fn stage(&mut self, stream: &Arc<CudaStream>, bytes: &[u8]) -> Option<u64> {
        let base = {
            let arena = match &mut self.arena {
                Some(a) => a,
                // SAFETY: uninitialised; only bytes uploaded by `send` are read. (No memset: a device write
                // that is not a kernel must not run ahead of recorded launches.)
                None => self.arena.insert(ok(
                    unsafe { stream.alloc::<u8>(ARENA_BYTES) },
                    "graph arena",
                )),
            };
            let (p, _sync) = cudarc::driver::DevicePtr::device_ptr(&*arena, stream);
            p
        };
        if let Some(&off) = self.staged.get(bytes) {
            return Some(base + off as u64);
        }
        let off = self.arena_host.len().next_multiple_of(256);
        if off + bytes.len() > ARENA_BYTES {
            return None;
        }
        self.arena_host.resize(off, 0);
        self.arena_host.extend_from_slice(bytes);
        self.staged.insert(bytes.to_vec(), off);
        Some(base + off as u64)
    }

    /// After a synchronisation: the arena's arrays are no longer needed and it fills from its start again.
    pub fn reset_arena(&mut self) {
        debug_assert!(self.pending.is_empty());
        self.arena_host.clear();
        self.staged.clear();
        self.uploaded = 0;
        self.generation += 1;
        self.limit = FIRST_SEGMENT.min(self.segment);
    }

    /// Sends the recorded launches: uploads the arena's new bytes, then replays, builds or plainly issues them.
    /// `issue` launches one kernel on the stream (plain or, inside a capture, captured).
    pub fn send(
        &mut self,
        stream: &Arc<CudaStream>,
        issue: &dyn Fn(&Launch) -> Result<(), String>,
    ) {
        if self.pending.is_empty() {
            return;
        }
        let launches = std::mem::take(&mut self.pending);
        self.limit = (self.limit * 2).min(self.segment);
        if self.uploaded < self.arena_host.len() {
            let arena = self
                .arena
                .as_mut()
                .expect("bytes were staged into the arena");
            let mut view = arena.slice_mut(self.uploaded..self.arena_host.len());
            ok(
                stream.memcpy_htod(&self.arena_host[self.uploaded..], &mut view),
                "graph arena upload",
            );
            self.uploaded = self.arena_host.len();
        }
        if self.broken.is_some() {
            return issue_all(&launches, issue);
        }
        let key = sequence_key(&launches);
        self.tick += 1;
        let r = self.send_as_graph(key, &launches, stream, issue);
        if r.is_err() {
            // The segment did not run (a failed update, capture or graph launch runs nothing): issue it plainly.
            issue_all(&launches, issue);
        }
        self.give_up_on(r);
    }

    /// Replays, captures or (first sight) plainly issues one segment; Err means none of it ran.
    fn send_as_graph(
        &mut self,
        key: u64,
        launches: &[Launch],
        stream: &Arc<CudaStream>,
        issue: &dyn Fn(&Launch) -> Result<(), String>,
    ) -> Result<(), String> {
        let tick = self.tick;
        if let Some(variants) = self.graphs.get_mut(&key) {
            // Two sequences with one key (a hash collision): the new one replaces the old.
            variants.retain(|g| same_kernels(&g.launches, launches));
            // The variant whose arguments are closest: buffers recycled in a round's own rhythm (a state's two
            // buffers taking turns, say) come back to the same addresses every other round, so a few variants of
            // a segment replay with few updates. Another variant is captured only when the closest differs in
            // more than a quarter of the segment's launches: a capture costs more than updating that many nodes.
            let best = variants
                .iter()
                .enumerate()
                .map(|(i, g)| (g.differing(launches), i))
                .min();
            if let Some((d, i)) = best {
                if d * 4 <= launches.len() || variants.len() >= VARIANTS {
                    let g = &mut variants[i];
                    g.used = tick;
                    return replay(g, launches, stream, &mut self.stats);
                }
                if trace() {
                    trace_build(&variants[i], variants.len(), launches);
                }
            }
        } else if !self.seen.contains(&key) {
            // First sight: plain launches (a sequence seen once, like a prompt's, is never captured).
            if self.seen.len() > 4096 {
                self.seen.clear();
            }
            self.seen.insert(key);
            self.stats.plain_sends += 1;
            issue_all(launches, issue);
            return Ok(());
        }
        let mut g = build(launches, stream, issue)?;
        self.stats.builds += 1;
        g.used = tick;
        let r = launch_graph(&g, stream);
        self.graphs.entry(key).or_default().push(g);
        self.evict();
        r.map(|()| self.stats.graph_sends += 1)
    }

    /// After a graph call failed: plain launches from now on (the error is printed once and kept).
    fn give_up_on(&mut self, r: Result<(), String>) {
        if let Err(e) = r {
            eprintln!("CUDA graphs off from now on: {e}");
            self.graphs.clear();
            self.broken = Some(e);
        }
    }

    /// Drops the least recently used graphs beyond MAX_GRAPHS.
    fn evict(&mut self) {
        let mut all: Vec<(u64, u64, usize)> = self
            .graphs
            .iter()
            .flat_map(|(&k, v)| v.iter().enumerate().map(move |(i, g)| (g.used, k, i)))
            .collect();
        if all.len() <= MAX_GRAPHS {
            return;
        }
        all.sort_unstable();
        let mut drop: Vec<(u64, usize)> = all[..all.len() - MAX_GRAPHS]
            .iter()
            .map(|&(_, k, i)| (k, i))
            .collect();
        // Highest index first, so removing one does not move the others of its key.
        drop.sort_unstable_by_key(|d| std::cmp::Reverse(d.1));
        for (k, i) in drop {
            if let Some(v) = self.graphs.get_mut(&k) {
                v.remove(i);
            }
        }
        self.graphs.retain(|_, v| !v.is_empty());
    }
}

fn issue_all(launches: &[Launch], issue: &dyn Fn(&Launch) -> Result<(), String>) {
    for l in launches {
        if let Err(e) = issue(l) {
            panic!("CUDA error in a kernel launch: {e}");
        }
    }
}

fn same_kernels(a: &[Launch], b: &[Launch]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.func == y.func && x.block == y.block)
}

/// A hash of the kernels and block sizes in order: segments with the same key differ only in grids and arguments.
fn sequence_key(launches: &[Launch]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    launches.len().hash(&mut h);
    for l in launches {
        (l.func as usize).hash(&mut h);
        l.block.hash(&mut h);
    }
    h.finish()
}

fn check(r: sys::CUresult, what: &str) -> Result<(), String> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what}: {r:?}"))
    }
}

/// Captures `launches` on the stream into a graph (their dependent-launch edges included) and instantiates it.
fn build(
    launches: &[Launch],
    stream: &CudaStream,
    issue: &dyn Fn(&Launch) -> Result<(), String>,
) -> Result<Exec, String> {
    let s = stream.cu_stream();
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: the stream is this device's; relaxed mode leaves other threads' driver calls alone; every launch
    // below is captured, not run, and the capture is ended on every path.
    unsafe {
        check(
            sys::cuStreamBeginCapture_v2(
                s,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            ),
            "begin capture",
        )?;
        let issued: Result<(), String> = launches.iter().try_for_each(issue);
        let ended = check(sys::cuStreamEndCapture(s, &mut graph), "end capture");
        issued?;
        ended?;
    }
    let mut exec: sys::CUgraphExec = std::ptr::null_mut();
    // SAFETY: `graph` was just captured; the out-parameter is valid.
    let inst = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) };
    if let Err(e) = check(inst, "instantiate") {
        // SAFETY: the graph is ours and unused.
        unsafe { sys::cuGraphDestroy(graph) };
        return Err(e);
    }
    let mut g = Exec {
        graph,
        exec,
        nodes: Vec::new(),
        launches: launches.to_vec(),
        used: 0,
    };
    g.nodes = chain_nodes(graph, launches.len())?;
    Ok(g)
}

/// The nodes of a captured chain in launch order (each node's one dependent is the next launch).
fn chain_nodes(graph: sys::CUgraph, n: usize) -> Result<Vec<sys::CUgraphNode>, String> {
    let mut nodes = Vec::with_capacity(n);
    let mut count = 1usize;
    let mut node: sys::CUgraphNode;
    // SAFETY: out-parameters sized by the counts passed (arrays of 1 and 2; more dependents is an error below);
    // CUgraphEdgeData is a plain C struct, valid when zeroed.
    unsafe {
        let mut roots = [std::ptr::null_mut(); 1];
        let mut nroots = 0usize;
        check(
            sys::cuGraphGetRootNodes(graph, std::ptr::null_mut(), &mut nroots),
            "graph roots",
        )?;
        if nroots != 1 {
            return Err(format!("a captured segment has {nroots} roots, not 1"));
        }
        check(
            sys::cuGraphGetRootNodes(graph, roots.as_mut_ptr(), &mut nroots),
            "graph roots",
        )?;
        node = roots[0];
        while count > 0 {
            nodes.push(node);
            // Edge data is asked for too: the dependent-launch edges are not default ones, and a query without
            // it fails as lossy.
            let mut edges: [sys::CUgraphEdgeData; 2] = std::mem::zeroed();
            let mut next = [std::ptr::null_mut(); 2];
            count = 2;
            check(
                sys::cuGraphNodeGetDependentNodes_v2(
                    node,
                    next.as_mut_ptr(),
                    edges.as_mut_ptr(),
                    &mut count,
                ),
                "graph node dependents",
            )?;
            if count > 1 {
                return Err(format!("a captured node has {count} dependents, not 1"));
            }
            node = next[0];
        }
    }
    if nodes.len() != n {
        return Err(format!(
            "a captured segment of {n} launches has {} nodes",
            nodes.len()
        ));
    }
    Ok(nodes)
}

/// Updates the nodes whose launches changed, then launches the graph.
fn replay(
    g: &mut Exec,
    launches: &[Launch],
    stream: &CudaStream,
    stats: &mut GraphStats,
) -> Result<(), String> {
    for (i, l) in launches.iter().enumerate() {
        if g.launches[i].same_params(l) {
            continue;
        }
        if trace() {
            trace_update(i, &g.launches[i], l);
        }
        let mut vals = l.args.clone();
        let mut ptrs = Launch::param_ptrs(&mut vals);
        let params = sys::CUDA_KERNEL_NODE_PARAMS {
            func: l.func,
            gridDimX: l.grid.0,
            gridDimY: l.grid.1,
            gridDimZ: l.grid.2,
            blockDimX: l.block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: l.smem,
            kernelParams: ptrs.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        // SAFETY: the node belongs to this exec's graph and runs the same function; the argument values are
        // copied by the driver during the call.
        check(
            unsafe { sys::cuGraphExecKernelNodeSetParams_v2(g.exec, g.nodes[i], &params) },
            "update a graph node",
        )?;
        stats.node_updates += 1;
        g.launches[i] = l.clone();
    }
    launch_graph(g, stream)?;
    stats.graph_sends += 1;
    Ok(())
}

fn launch_graph(g: &Exec, stream: &CudaStream) -> Result<(), String> {
    // SAFETY: an instantiated graph on this device's stream.
    check(
        unsafe { sys::cuGraphLaunch(g.exec, stream.cu_stream()) },
        "graph launch",
    )
}

/// `TENSORFOLD_CUDA_GRAPH_TRACE=1`: each node update is printed (which arguments changed), to find what moves
/// from round to round.
fn trace() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_GRAPH_TRACE").is_ok_and(|v| v != "0"))
}

fn trace_update(i: usize, old: &Launch, new: &Launch) {
    let changed: Vec<String> = old
        .args
        .iter()
        .zip(&new.args)
        .enumerate()
        .filter(|(_, (a, b))| a.bits() != b.bits())
        .map(|(j, (a, b))| format!("arg {j}: {a:?} -> {b:?}"))
        .collect();
    eprintln!(
        "graph node {i}: grid {:?} -> {:?}; {}",
        old.grid,
        new.grid,
        changed.join(", ")
    );
}

/// Why a variant is captured: the launches where the closest of `count` variants differs.
fn trace_build(closest: &Exec, count: usize, launches: &[Launch]) {
    eprintln!("graph build: the closest of {count} variants differs in:");
    for (j, (a, b)) in closest.launches.iter().zip(launches).enumerate() {
        if !a.same_params(b) {
            trace_update(j, a, b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(func: usize, block: u32, args: Vec<Arg>) -> Launch {
        Launch {
            func: func as sys::CUfunction,
            grid: (1, 1, 1),
            block,
            smem: 0,
            args,
        }
    }

    #[test]
    fn launches_match_on_argument_bits_so_a_nan_matches_itself_and_zero_signs_differ() {
        let nan = launch(1, 32, vec![Arg::F(f32::NAN), Arg::D(1.5)]);
        assert!(nan.same_params(&nan.clone()));
        let pos = launch(1, 32, vec![Arg::F(0.0)]);
        let neg = launch(1, 32, vec![Arg::F(-0.0)]);
        assert!(!pos.same_params(&neg));
        let mut wider = pos.clone();
        wider.grid = (2, 1, 1);
        assert!(!pos.same_params(&wider));
        // An i32 and a pointer with the same value are different arguments.
        assert!(!launch(1, 32, vec![Arg::I(7)]).same_params(&launch(1, 32, vec![Arg::P(7)])));
    }

    #[test]
    fn a_segments_key_follows_its_kernels_and_blocks_not_its_arguments() {
        let a = [launch(1, 32, vec![Arg::P(8)]), launch(2, 64, vec![])];
        let same_kernels_new_args = [
            launch(1, 32, vec![Arg::P(16)]),
            launch(2, 64, vec![Arg::I(3)]),
        ];
        assert_eq!(sequence_key(&a), sequence_key(&same_kernels_new_args));
        assert!(same_kernels(&a, &same_kernels_new_args));
        let swapped = [launch(2, 64, vec![]), launch(1, 32, vec![Arg::P(8)])];
        assert_ne!(sequence_key(&a), sequence_key(&swapped));
        let other_block = [launch(1, 32, vec![Arg::P(8)]), launch(2, 128, vec![])];
        assert_ne!(sequence_key(&a), sequence_key(&other_block));
        assert!(!same_kernels(&a, &other_block));
        assert!(!same_kernels(&a, &a[..1]));
    }
}
