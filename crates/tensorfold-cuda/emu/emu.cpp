// emu.cpp: a stand-in libcuda.so for tests on machines without a GPU: "device" memory is host memory, streams
// run work at once, and a launch runs the named kernel (compiled for the CPU from the same sources, see
// build.sh) block by block with each thread a fiber; graphs replay captured launches; a launch the GPU would refuse
// for its registers or shared memory is refused (limits.cpp). Only the driver calls this crate makes are provided.
#include "emu.h"
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <map>
#include <ucontext.h>
#include <setjmp.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum { OK = 0, ERR_INVALID_VALUE = 1, ERR_NOT_FOUND = 500, ERR_LAUNCH_OUT_OF_RESOURCES = 701 };
// limits.cpp: each kernel's registers and static shared memory, from the cubin the host loads.
void emu_read_cubin(const void* image);
void emu_kernel_limits(const char* name, int* regs, int* static_smem);
unsigned emu_max_threads(const char* name);
bool emu_launch_refused(const char* name, unsigned threads, unsigned dyn_smem);

// ---- fibers
struct EmuThread {
    ucontext_t ctx;
    jmp_buf jb;
    bool started = false;
    std::vector<char> stack;
    unsigned tid;
    bool done = false;
    unsigned warp_gen_seen = 0, block_gen_seen = 0;
    // Copies issued and not yet made (emu_cp_async), and where each committed group ends in that list.
    struct Copy { void* dst; const void* src; int n; bool valid; };
    std::vector<Copy> copies;
    std::vector<size_t> group_ends;
};
thread_local EmuThread* emu_cur = nullptr;
dim3e emu_block_idx, emu_block_dim, emu_grid_dim;
static ucontext_t sched_ctx;
static jmp_buf sched_jb;
static std::vector<EmuThread*> threads;
static void (*cur_kernel)(void**) = nullptr;
static void** cur_args = nullptr;
struct Rendezvous { unsigned arrived = 0, gen = 0; };
static std::vector<Rendezvous> warp_rv;
// A launch runs a cluster's blocks together (one block unless the kernel has __cluster_dims__): fiber t is thread
// t % blockDim of the cluster's block t / blockDim, with a barrier of its own per block and one for the cluster.
static std::vector<Rendezvous> block_rv;
static Rendezvous cluster_rv;
static std::vector<unsigned> warp_alive, block_alive;
static unsigned cluster_alive = 0;
static std::vector<float> shfl_slot;
static std::vector<unsigned> exchange_slot;  // EMU_EXCHANGE_WORDS a thread (emu_warp_exchange)

uint3e emu_thread_idx() { return uint3e{emu_cur->tid % emu_block_dim.x, 0, 0}; }
dim3e emu_block_index() { return dim3e{emu_block_idx.x + emu_cur->tid / emu_block_dim.x, emu_block_idx.y, emu_block_idx.z}; }
int emu_cluster_rank() { return (int)(emu_cur->tid / emu_block_dim.x); }

// Dynamic shared memory: 16-byte aligned, poisoned at each launch like fresh device memory.
static std::vector<float4> dyn_smem;
unsigned char* emu_dynamic_smem() { return reinterpret_cast<unsigned char*>(dyn_smem.data()); }

// Fibers start once through swapcontext, then switch with _setjmp/_longjmp (no signal-mask system calls).
static void yield() {
    if (!_setjmp(emu_cur->jb)) _longjmp(sched_jb, 1);
}

static void wait_at(Rendezvous& rv, unsigned alive) {
    unsigned gen = rv.gen;
    if (++rv.arrived == alive) { rv.arrived = 0; rv.gen++; return; }
    while (rv.gen == gen) yield();
}

void emu_syncwarp() { wait_at(warp_rv[emu_cur->tid / 32], warp_alive[emu_cur->tid / 32]); }
void emu_syncthreads() {
    const unsigned b = emu_cur->tid / emu_block_dim.x;
    wait_at(block_rv[b], block_alive[b]);
}
void emu_cluster_sync() { wait_at(cluster_rv, cluster_alive); }

float emu_shfl(float v, int src) {
    unsigned w = emu_cur->tid / 32;
    shfl_slot[emu_cur->tid] = v;
    emu_syncwarp();
    unsigned s = w * 32 + ((unsigned)src & 31);
    if (s >= threads.size() || threads[s]->done) { fprintf(stderr, "emu: shuffle from an exited or absent lane %u\n", s); abort(); }
    float r = shfl_slot[s];
    emu_syncwarp();
    return r;
}

void emu_warp_exchange(const unsigned* mine, int n, unsigned* all) {
    if (n > EMU_EXCHANGE_WORDS) { fprintf(stderr, "emu: exchange of %d words (at most %d)\n", n, EMU_EXCHANGE_WORDS); abort(); }
    const unsigned w = emu_cur->tid / 32;
    for (int i = 0; i < n; ++i) exchange_slot[EMU_EXCHANGE_WORDS * emu_cur->tid + i] = mine[i];
    emu_syncwarp();
    for (unsigned l = 0; l < 32; ++l) {
        const unsigned s = w * 32 + l;
        if (s >= threads.size() || threads[s]->done) { fprintf(stderr, "emu: exchange with an exited or absent lane %u\n", s); abort(); }
        for (int i = 0; i < n; ++i) all[l * n + i] = exchange_slot[EMU_EXCHANGE_WORDS * s + i];
    }
    emu_syncwarp();
}

void emu_cp_async(void* dst, const void* src, int n, bool valid) { emu_cur->copies.push_back({dst, src, n, valid}); }
void emu_cp_async_commit() { emu_cur->group_ends.push_back(emu_cur->copies.size()); }

// Makes the copies of every committed group but the newest `newest_left`, in issue order.
void emu_cp_async_wait(int newest_left) {
    EmuThread* th = emu_cur;
    const long groups = (long)th->group_ends.size() - newest_left;
    if (groups <= 0) return;
    const size_t made = th->group_ends[groups - 1];
    for (size_t i = 0; i < made; ++i) {
        const EmuThread::Copy& c = th->copies[i];
        if (c.valid) memcpy(c.dst, c.src, c.n); else memset(c.dst, 0, c.n);
    }
    th->copies.erase(th->copies.begin(), th->copies.begin() + made);
    th->group_ends.erase(th->group_ends.begin(), th->group_ends.begin() + groups);
    for (size_t& e : th->group_ends) e -= made;
}

static void fiber_main() {
    cur_kernel(cur_args);
    // A thread's copies complete even if it never waits for them (nothing may read them, but they land).
    emu_cp_async_commit();
    emu_cp_async_wait(0);
    emu_cur->done = true;
    _longjmp(sched_jb, 1);
}

// Runs the `cluster` blocks of `bx` threads from emu_block_idx on (bx % 32 == 0 when cluster > 1, so that fiber
// t's warp is t / 32 in every block).
static void run_block(unsigned bx, unsigned cluster) {
    const unsigned nthreads = bx * cluster;
    unsigned nwarps = (nthreads + 31) / 32;
    warp_rv.assign(nwarps, Rendezvous{});
    block_rv.assign(cluster, Rendezvous{});
    cluster_rv = Rendezvous{};
    warp_alive.assign(nwarps, 0);
    for (unsigned t = 0; t < nthreads; ++t) warp_alive[t / 32]++;
    block_alive.assign(cluster, bx);
    cluster_alive = nthreads;
    shfl_slot.assign(nthreads, 0.0f);
    exchange_slot.assign(EMU_EXCHANGE_WORDS * (size_t)nthreads, 0u);
    static std::vector<EmuThread> pool;
    if (pool.size() < nthreads) pool.resize(nthreads);
    threads.clear();
    for (unsigned t = 0; t < nthreads; ++t) {
        EmuThread* th = &pool[t];
        th->tid = t;
        th->done = false;
        th->started = false;
        th->copies.clear();
        th->group_ends.clear();
        if (th->stack.empty()) th->stack.resize(256 * 1024);
        getcontext(&th->ctx);
        th->ctx.uc_stack.ss_sp = th->stack.data();
        th->ctx.uc_stack.ss_size = th->stack.size();
        th->ctx.uc_link = nullptr;
        makecontext(&th->ctx, fiber_main, 0);
        threads.push_back(th);
    }
    unsigned live = nthreads;
    while (live > 0) {
        for (EmuThread* th : threads) {
            if (th->done) continue;
            emu_cur = th;
            if (!_setjmp(sched_jb)) {
                if (!th->started) {
                    th->started = true;
                    swapcontext(&sched_ctx, &th->ctx);
                } else {
                    _longjmp(th->jb, 1);
                }
            }
            if (th->done) {
                live--;
                unsigned w = th->tid / 32, b = th->tid / bx;
                warp_alive[w]--;
                block_alive[b]--;
                cluster_alive--;
                // Waiters may now be complete.
                if (warp_alive[w] > 0 && warp_rv[w].arrived == warp_alive[w]) { warp_rv[w].arrived = 0; warp_rv[w].gen++; }
                if (block_alive[b] > 0 && block_rv[b].arrived == block_alive[b]) { block_rv[b].arrived = 0; block_rv[b].gen++; }
                if (cluster_alive > 0 && cluster_rv.arrived == cluster_alive) { cluster_rv.arrived = 0; cluster_rv.gen++; }
            }
        }
    }
    emu_cur = nullptr;
}

// ---- kernels (generated by build.sh)
struct EmuKernel { const char* name; void (*fn)(void**); int nargs; const int* sizes; int cluster; };
extern const EmuKernel emu_kernels[];
extern const int emu_kernel_count;

// ---- the driver API subset
extern "C" {
CUresult cuInit(unsigned) { return OK; }
CUresult cuDriverGetVersion(int* v) { *v = 13000; return OK; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return OK; }
CUresult cuDeviceGet(int* d, int ordinal) { if (ordinal != 0) return ERR_INVALID_VALUE; *d = 0; return OK; }
CUresult cuDeviceGetAttribute(int* v, int attr, int) {
    switch (attr) {
        case 75: *v = 9; break;   // compute capability major
        case 76: *v = 0; break;   // minor
        case 115: *v = 1; break;  // memory pools: yes (stream-ordered allocations)
        case 97: *v = 232448; break;  // shared memory a block may opt in to (the H200's 227 KB)
        default: *v = 0;
    }
    return OK;
}
CUresult cuDeviceGetName(char* name, int len, int) { snprintf(name, len, "CPU emulator"); return OK; }
CUresult cuDeviceTotalMem_v2(size_t* b, int) { *b = (size_t)8 << 30; return OK; }
static int the_ctx = 1;
static void* cur_ctx = nullptr;
CUresult cuDevicePrimaryCtxRetain(void** ctx, int) { *ctx = &the_ctx; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(int) { return OK; }
CUresult cuCtxSetCurrent(void* c) { cur_ctx = c; return OK; }
CUresult cuCtxGetCurrent(void** c) { *c = cur_ctx; return OK; }
CUresult cuCtxSynchronize() { return OK; }
static int stream_token = 2;
CUresult cuStreamCreate(void** s, unsigned) { *s = &stream_token; return OK; }
CUresult cuStreamCreateWithPriority(void** s, unsigned, int) { *s = &stream_token; return OK; }
CUresult cuStreamDestroy_v2(void*) { return OK; }
CUresult cuStreamSynchronize(void*) { return OK; }
// Bytes allocated and not freed, by address, so cuMemGetInfo can tell what is left of cuDeviceTotalMem's 8 GiB.
static std::map<CUdeviceptr, size_t> live_sizes;
static size_t live_bytes = 0;
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
    void* m = aligned_alloc(256, ((n + 255) / 256) * 256 + 256);
    if (!m) return 2;
    memset(m, 0xAB, ((n + 255) / 256) * 256);  // poison: reads of unwritten memory show up as odd values
    *p = (CUdeviceptr)m;
    live_sizes[*p] = n;
    live_bytes += n;
    return OK;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
    auto it = live_sizes.find(p);
    if (it != live_sizes.end()) {
        live_bytes -= it->second;
        live_sizes.erase(it);
    }
    free((void*)p);
    return OK;
}
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
    size_t t = 0;
    cuDeviceTotalMem_v2(&t, 0);
    *total = t;
    *free_bytes = live_bytes < t ? t - live_bytes : 0;
    return OK;
}
// Stream-ordered allocations behave as the driver's pool does: a freed block is kept (never handed back to
// malloc, where host code could write it) and given, unwritten, to a later allocation of its size. So a kernel
// the backend recorded before a free but sends after it (graph.rs) reads what a GPU would.
static std::map<CUdeviceptr, size_t> async_sizes;
static std::map<size_t, std::vector<CUdeviceptr>> async_idle;
CUresult cuMemAllocAsync(CUdeviceptr* p, size_t n, void*) {
    size_t size = ((n + 255) / 256) * 256;
    auto& idle = async_idle[size];
    if (!idle.empty()) {
        *p = idle.back();
        idle.pop_back();
        return OK;
    }
    CUresult r = cuMemAlloc_v2(p, n);
    if (r == OK) async_sizes[*p] = size;
    return r;
}
CUresult cuMemFreeAsync(CUdeviceptr p, void*) {
    auto it = async_sizes.find(p);
    if (it == async_sizes.end()) return cuMemFree_v2(p);
    async_idle[it->second].push_back(p);
    return OK;
}
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void*) { memset((void*)p, v, n); return OK; }
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { memset((void*)p, v, n); return OK; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, void*) { memcpy((void*)d, s, n); return OK; }
CUresult cuMemcpyDtoHAsync_v2(void* d, CUdeviceptr s, size_t n, void*) { memcpy(d, (void*)s, n); return OK; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void*) { memmove((void*)d, (void*)s, n); return OK; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void* s, size_t n) { memcpy((void*)d, s, n); return OK; }
CUresult cuMemcpyDtoH_v2(void* d, CUdeviceptr s, size_t n) { memcpy(d, (void*)s, n); return OK; }
static int module_token = 3;
CUresult cuModuleLoadData(void** m, const void* image) {
    emu_read_cubin(image);
    *m = &module_token;
    return OK;
}
CUresult cuModuleUnload(void*) { return OK; }
CUresult cuModuleGetFunction(void** f, void*, const char* name) {
    for (int i = 0; i < emu_kernel_count; ++i)
        if (strcmp(emu_kernels[i].name, name) == 0) { *f = (void*)&emu_kernels[i]; return OK; }
    return ERR_NOT_FOUND;
}
// ---- graphs: a capture records launches (with copies of their arguments) as a chain of nodes; an executable
// graph holds its own copy of the nodes' launches and runs them in order.
struct EmuLaunch {
    const EmuKernel* k;
    unsigned g[3], b, smem;
    std::vector<std::vector<char>> args;
};
struct EmuGraph;
struct EmuNode { EmuGraph* graph; size_t idx; };
struct EmuGraph { std::vector<EmuNode*> nodes; std::vector<EmuLaunch> launches; };
struct EmuExec { std::vector<EmuLaunch> launches; };
static EmuGraph* capturing = nullptr;
static EmuLaunch copy_launch(const EmuKernel* k, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned smem,
                             void** params) {
    EmuLaunch l{k, {gx, gy, gz}, bx, smem, {}};
    for (int i = 0; i < k->nargs; ++i) {
        const char* p = (const char*)params[i];
        l.args.emplace_back(p, p + k->sizes[i]);
    }
    return l;
}
// The most dynamic shared memory each kernel may take (cuFuncSetAttribute); 48 KB unless raised, as on the GPU.
static std::map<const void*, int> dyn_smem_max;
CUresult cuFuncSetAttribute(void* f, int attr, int value) {
    if (attr != 8 || value < 0 || value > 232448) return ERR_INVALID_VALUE;  // 8: max dynamic shared size
    dyn_smem_max[f] = value;
    return OK;
}
// The cubin's numbers (limits.cpp): 0 the most threads a block, 1 static shared memory, 4 registers a thread;
// any other attribute asked: 0.
CUresult cuFuncGetAttribute(int* v, int attr, void* f) {
    int regs, smem;
    const char* name = ((const EmuKernel*)f)->name;
    emu_kernel_limits(name, &regs, &smem);
    *v = attr == 0 ? (int)emu_max_threads(name) : attr == 1 ? smem : attr == 4 ? regs : 0;
    return OK;
}
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, void*, void** params, void**) {
    if (by != 1 || bz != 1 || bx == 0 || bx > 1024) return ERR_INVALID_VALUE;
    if (gy > 65535 || gz > 65535) return ERR_INVALID_VALUE;
    const auto lim = dyn_smem_max.find(f);
    if (smem > (lim == dyn_smem_max.end() ? 48u * 1024 : (unsigned)lim->second)) return ERR_INVALID_VALUE;
    const EmuKernel* k = (const EmuKernel*)f;
    if (emu_launch_refused(k->name, bx, smem)) return ERR_LAUNCH_OUT_OF_RESOURCES;
    if (capturing) {
        capturing->launches.push_back(copy_launch(k, gx, gy, gz, bx, smem, params));
        capturing->nodes.push_back(new EmuNode{capturing, capturing->nodes.size()});
        return OK;
    }
    static const bool skip = getenv("EMU_SKIP_KERNELS") != nullptr;  // host-overhead measurements
    if (skip) return OK;
    cur_kernel = k->fn;
    cur_args = params;
    dyn_smem.assign((smem + 15) / 16, float4{__uint_as_float(0xABABABABu), __uint_as_float(0xABABABABu),
                                             __uint_as_float(0xABABABABu), __uint_as_float(0xABABABABu)});
    emu_grid_dim = dim3e{gx, gy, gz};
    emu_block_dim = dim3e{bx, 1, 1};
    const unsigned cl = (unsigned)k->cluster;
    // As the driver: a cluster kernel's grid is whole clusters.
    if (gx % cl != 0 || (cl > 1 && bx % 32 != 0)) return ERR_INVALID_VALUE;
    for (unsigned z = 0; z < gz; ++z)
        for (unsigned y = 0; y < gy; ++y)
            for (unsigned x = 0; x < gx; x += cl) {
                emu_block_idx = dim3e{x, y, z};
                run_block(bx, cl);
            }
    return OK;
}
// cuLaunchKernelEx's config, as the driver lays it out (the attributes are ignored: work runs at launch, in order).
struct EmuLaunchConfig { unsigned gx, gy, gz, bx, by, bz, smem; void* stream; void* attrs; unsigned n_attrs; };
CUresult cuLaunchKernelEx(const EmuLaunchConfig* c, void* f, void** params, void** extra) {
    return cuLaunchKernel(f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->smem, c->stream, params, extra);
}
CUresult cuStreamBeginCapture_v2(void*, int) {
    if (capturing) return ERR_INVALID_VALUE;
    capturing = new EmuGraph;
    return OK;
}
CUresult cuStreamEndCapture(void*, void** g) {
    if (!capturing) return ERR_INVALID_VALUE;
    *g = capturing;
    capturing = nullptr;
    return OK;
}
CUresult cuGraphGetRootNodes(void* g, void** nodes, size_t* n) {
    EmuGraph* gr = (EmuGraph*)g;
    size_t have = gr->nodes.empty() ? 0 : 1;
    if (nodes && *n > 0 && have) nodes[0] = gr->nodes[0];
    *n = have;
    return OK;
}
// Edge data is 8 bytes a dependent in the driver's layout (zeroed here: default edges).
CUresult cuGraphNodeGetDependentNodes_v2(void* node, void** deps, void* edges, size_t* n) {
    EmuNode* nd = (EmuNode*)node;
    size_t have = nd->idx + 1 < nd->graph->nodes.size() ? 1 : 0;
    if (deps && *n > 0 && have) {
        deps[0] = nd->graph->nodes[nd->idx + 1];
        if (edges) memset(edges, 0, 8);
    }
    *n = have;
    return OK;
}
CUresult cuGraphInstantiateWithFlags(void** exec, void* g, unsigned long long) {
    *exec = new EmuExec{((EmuGraph*)g)->launches};
    return OK;
}
struct EmuKernelNodeParams { void* func; unsigned gx, gy, gz, bx, by, bz, smem; void** params; void** extra; void* kern; void* ctx; };
CUresult cuGraphExecKernelNodeSetParams_v2(void* exec, void* node, const EmuKernelNodeParams* p) {
    EmuExec* e = (EmuExec*)exec;
    size_t i = ((EmuNode*)node)->idx;
    if (i >= e->launches.size() || p->by != 1 || p->bz != 1) return ERR_INVALID_VALUE;
    e->launches[i] = copy_launch((const EmuKernel*)p->func, p->gx, p->gy, p->gz, p->bx, p->smem, p->params);
    return OK;
}
CUresult cuGraphLaunch(void* exec, void* stream) {
    for (EmuLaunch& l : ((EmuExec*)exec)->launches) {
        std::vector<void*> ptrs;
        for (auto& a : l.args) ptrs.push_back(a.data());
        CUresult r = cuLaunchKernel((void*)l.k, l.g[0], l.g[1], l.g[2], l.b, 1, 1, l.smem, stream, ptrs.data(), nullptr);
        if (r != OK) return r;
    }
    return OK;
}
CUresult cuGraphExecDestroy(void* exec) { delete (EmuExec*)exec; return OK; }
CUresult cuGraphDestroy(void* g) {
    EmuGraph* gr = (EmuGraph*)g;
    for (EmuNode* n : gr->nodes) delete n;
    delete gr;
    return OK;
}
CUresult cuMemHostAlloc(void** p, size_t n, unsigned) { *p = aligned_alloc(4096, ((n + 4095) / 4096) * 4096 + 4096); return *p ? OK : 2; }
CUresult cuMemFreeHost(void* p) { free(p); return OK; }
// Events hold the wall-clock time of their record (work runs at launch, so that is when it finished).
CUresult cuEventCreate(void** e, unsigned) { *e = new double(0.0); return OK; }
CUresult cuEventDestroy_v2(void* e) { delete (double*)e; return OK; }
CUresult cuEventRecord(void* e, void*) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *(double*)e = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    return OK;
}
CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) { *ms = (float)(*(double*)b - *(double*)a); return OK; }
CUresult cuEventSynchronize(void*) { return OK; }
CUresult cuStreamWaitEvent(void*, void*, unsigned) { return OK; }
static int pool_token = 5;
CUresult cuDeviceGetDefaultMemPool(void** pool, int) { *pool = &pool_token; return OK; }
CUresult cuMemPoolSetAttribute(void*, int attr, void* v) { return (attr == 4 && *(unsigned long long*)v != 0) ? OK : ERR_INVALID_VALUE; }
CUresult cuGetExportTable(const void**, const void*) { return ERR_NOT_FOUND; }
CUresult cuGetErrorString(CUresult, const char** s) { *s = "emulator error"; return OK; }
CUresult cuGetErrorName(CUresult, const char** s) { *s = "EMU_ERROR"; return OK; }
}
