// The profiler's collection layer: CUPTI's Activity API into ProfileRecords (llmc/profiler/cupti_collector.cuh).
#include "llmc/profiler/cupti_collector.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cxxabi.h>
#include <iterator>
#include <map>
#include <mutex>
#include <sys/syscall.h>
#include <unistd.h>

#include "llmc/cuda_common.cuh"
#include "llmc/profiler/attribution.h"
#include "llmc/profiler/cupti_version.h"

namespace llmc::prof {

namespace {

constexpr CUpti_ActivityKind KINDS[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,          CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER,          CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_OVERHEAD};

// "cudaLaunchKernel_v7000" -> "cudaLaunchKernel": the version suffix only splits one API across rows.
std::string api_callback_name(CUpti_CallbackDomain domain, uint32_t cbid) {
    const char* name = nullptr;
    if (cuptiGetCallbackName(domain, cbid, &name) != CUPTI_SUCCESS || !name) return strprintf("api#%u", cbid);
    std::string s = name;
    size_t v = s.rfind("_v");
    if (v != std::string::npos && v + 2 < s.size() && s.find_first_not_of("0123456789", v + 2) == std::string::npos)
        s.resize(v);
    return s;
}

uint32_t current_thread_id() {
    thread_local uint32_t tid = (uint32_t)syscall(SYS_gettid);
    return tid;
}

CopyKind copy_kind(uint8_t k) {
    switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return CopyKind::HtoD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return CopyKind::DtoH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return CopyKind::DtoD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return CopyKind::HtoH;
    default: return CopyKind::Other;
    }
}
const char* sync_type(CUpti_ActivitySynchronizationType t) {
    switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: return "event";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT: return "stream_wait_event";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: return "stream";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE: return "context";
    default: return "unknown";
    }
}

// Errors meaning another tool (nsys, ncu, cuda-gdb) owns CUPTI: the profiler steps aside instead of failing.
bool cupti_taken(CUptiResult r) {
    return r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED || r == CUPTI_ERROR_NOT_COMPATIBLE;
}

// One record of each kind into `out` (parse() below), with the names demangled or looked up once per buffer.
struct Parser {
    CuptiCollector::Chunk out;
    std::unordered_map<std::string, std::string> kernel_names; // demangling is the costly part
    std::map<std::pair<int, uint32_t>, std::string> api_names;

    void kernel(const CUpti_ActivityKernel10* k) {
        if (k->start == 0 && k->end == 0) return; // no timestamps could be taken: nothing to attribute
        KernelRecord r;
        const char* mangled = k->name ? k->name : "";
        auto name = kernel_names.find(mangled);
        if (name == kernel_names.end()) name = kernel_names.emplace(mangled, demangle(k->name)).first;
        r.name = name->second;
        r.start_ns = k->start, r.end_ns = k->end;
        r.device = k->deviceId, r.stream = k->streamId, r.correlation = k->correlationId;
        r.grid[0] = k->gridX, r.grid[1] = k->gridY, r.grid[2] = k->gridZ;
        r.block[0] = k->blockX, r.block[1] = k->blockY, r.block[2] = k->blockZ;
        r.registers_per_thread = k->registersPerThread;
        r.static_smem = k->staticSharedMemory, r.dynamic_smem = k->dynamicSharedMemory;
        r.graph_node = k->graphNodeId;
        out.rec.kernels.push_back(std::move(r));
    }
    void memcpy(const CUpti_ActivityMemcpy6* m) {
        MemcpyRecord r;
        r.kind = copy_kind(m->copyKind);
        r.bytes = m->bytes, r.start_ns = m->start, r.end_ns = m->end;
        r.device = m->deviceId, r.stream = m->streamId;
        // The runtime call's id: it is the one our Ranges' external ids and ApiRecords carry.
        r.correlation = m->runtimeCorrelationId ? m->runtimeCorrelationId : m->correlationId;
        r.graph_node = m->graphNodeId;
        out.rec.memcpys.push_back(r);
    }
    void memset(const CUpti_ActivityMemset4* m) {
        MemsetRecord r;
        r.bytes = m->bytes, r.start_ns = m->start, r.end_ns = m->end;
        r.device = m->deviceId, r.stream = m->streamId, r.correlation = m->correlationId;
        r.graph_node = m->graphNodeId;
        out.rec.memsets.push_back(r);
    }
    void api(const CUpti_ActivityAPI* p, CUpti_ActivityKind kind) {
        auto domain = kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
        auto key = std::make_pair((int)domain, (uint32_t)p->cbid);
        auto name = api_names.find(key);
        if (name == api_names.end()) name = api_names.emplace(key, api_callback_name(domain, p->cbid)).first;
        out.rec.api.push_back(ApiRecord{name->second, p->start, p->end, p->threadId, p->correlationId});
    }
    void record(const CUpti_Activity* a) {
        switch (a->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: kernel(reinterpret_cast<const CUpti_ActivityKernel10*>(a)); break;
        case CUPTI_ACTIVITY_KIND_MEMCPY: memcpy(reinterpret_cast<const CUpti_ActivityMemcpy6*>(a)); break;
        case CUPTI_ACTIVITY_KIND_MEMSET: memset(reinterpret_cast<const CUpti_ActivityMemset4*>(a)); break;
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER: api(reinterpret_cast<const CUpti_ActivityAPI*>(a), a->kind); break;
        case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
            auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(a);
            out.rec.syncs.push_back(SyncRecord{sync_type(s->type), s->start, s->end, s->streamId, s->correlationId});
            break;
        }
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
            auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(a);
            if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
                out.external.push_back({e->correlationId, e->externalId});
            break;
        }
        case CUPTI_ACTIVITY_KIND_OVERHEAD: {
            auto* o = reinterpret_cast<const CUpti_ActivityOverhead3*>(a);
            if (o->end > o->start) out.rec.cupti_overhead_ns += (double)(o->end - o->start);
            break;
        }
        default:
            break;
        }
    }
};

// Copies every record we use out of a completed buffer; touches no shared state.
CuptiCollector::Chunk parse(uint8_t* buffer, size_t valid) {
    Parser p;
    CUpti_Activity* a = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) p.record(a);
    return std::move(p.out);
}

} // namespace

const char* cupti_error_string(CUptiResult r) {
    const char* msg = nullptr;
    return cuptiGetResultString(r, &msg) == CUPTI_SUCCESS && msg ? msg : "unknown CUPTI error";
}
void cupti_check(CUptiResult r, const char* what, const char* file, int line) {
    if (r != CUPTI_SUCCESS)
        throw Error(strprintf("CUPTI error in %s (%s:%d): %s", what, file, line, cupti_error_string(r)));
}

uint32_t checked_cupti_version() {
    uint32_t v = 0;
    CUPTI_CHECK(cuptiGetVersion(&v));
    const std::string why = cupti_version_mismatch(v, CUPTI_API_VERSION);
    if (!why.empty()) throw Error(why);
    return v;
}

bool cuda_tool_injected() {
    const char* p = getenv("CUDA_INJECTION64_PATH");
    return p && *p;
}

std::string demangle(const char* name) {
    if (!name) return "(unknown)";
    int status = 0;
    char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string out = status == 0 && d ? d : name;
    free(d);
    return out;
}

struct CuptiCollector::Pool {
    std::mutex buffers_mutex; // free_list, allocated
    std::vector<uint8_t*> free_list;
    int allocated = 0;
    std::mutex records_mutex; // sink, and the sink's rec_, external_ and callback_error_
    CuptiCollector* sink = nullptr;
    static Pool& get() {
        static Pool* pool = new Pool; // never destroyed: CUPTI can complete buffers during exit
        return *pool;
    }
};

bool CuptiCollector::start() {
    if (cuda_tool_injected()) { // its CUPTI session would see ours, or refuse it half-way
        printf("profiler: another CUDA tool is attached (nsys/ncu); in-process profiling off\n");
        return false;
    }
    checked_cupti_version();
    Pool& pool = Pool::get();
    {
        std::lock_guard<std::mutex> lock(pool.records_mutex);
        if (pool.sink) throw Error("profiler: a CUPTI collector is already running in this process");
        pool.sink = this;
    }
    // Every CUPTI client subscribes first; a second subscriber is refused, which is how a tool holding
    // CUPTI shows itself. The subscription's callbacks: graph nodes created and cloned (graph attribution).
    CUptiResult r = cuptiSubscribe(&subscriber_, &graph_node_callback, this);
    if (r != CUPTI_SUCCESS) subscriber_ = nullptr;
    for (CUpti_CallbackId cb : {CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED})
        if (r == CUPTI_SUCCESS) r = cuptiEnableCallback(1, subscriber_, CUPTI_CB_DOMAIN_RESOURCE, cb);
    if (r == CUPTI_SUCCESS) r = cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed);
    if (r == CUPTI_SUCCESS) r = cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM); // = gettid()
    for (size_t i = 0; r == CUPTI_SUCCESS && i < std::size(KINDS); i++) {
        r = cuptiActivityEnable(KINDS[i]);
        if (r == CUPTI_SUCCESS) enabled_kinds_++;
    }
    size_t dropped = 0; // starts the drop count from here
    if (r == CUPTI_SUCCESS) r = cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
    if (r != CUPTI_SUCCESS) {
        for (int i = 0; i < enabled_kinds_; i++) cuptiActivityDisable(KINDS[i]);
        enabled_kinds_ = 0;
        unsubscribe();
        detach_sink();
        if (cupti_taken(r)) {
            printf("profiler: CUPTI is in use by another tool (nsys/ncu?); in-process profiling off\n");
            return false;
        }
        throw Error(strprintf("profiler: cannot start CUPTI activity tracing: %s", cupti_error_string(r)));
    }
    range_hook() = RangeHook{&hook_push, &hook_pop, this};
    running_ = true;
    return true;
}

void CuptiCollector::begin_step(int step) {
    if (!running_) return;
    step_ = step;
    steps_.push_back(StepRecord{step, timestamp(), 0, 0});
}

void CuptiCollector::end_step(long tokens) {
    if (!running_ || step_ < 0) return;
    steps_.back().end_ns = timestamp();
    steps_.back().tokens = tokens;
    step_ = -1;
}

void CuptiCollector::flush() {
    if (!running_) return;
    CUPTI_CHECK(cuptiActivityFlushAll(0));
    count_dropped();
    rethrow_callback_error();
}

void CuptiCollector::stop() {
    if (!running_) return;
    running_ = false;
    range_hook() = RangeHook{};
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < enabled_kinds_; i++) CUPTI_CHECK(cuptiActivityDisable(KINDS[i]));
    enabled_kinds_ = 0;
    CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    count_dropped();
    unsubscribe();
    detach_sink();
    rethrow_callback_error();
}

ProfileRecords CuptiCollector::take() {
    if (running_) throw Error("profiler: take() before stop()");
    ProfileRecords r = std::move(rec_);
    rec_ = ProfileRecords{};
    r.ranges = std::move(ranges_);
    r.steps = std::move(steps_);
    ranges_.clear(), steps_.clear(), open_.clear();
    attribute_activities(r, external_, graph_nodes_);
    external_.clear(), graph_nodes_.clear();
    auto by_start = [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; };
    std::stable_sort(r.kernels.begin(), r.kernels.end(), by_start);
    std::stable_sort(r.memcpys.begin(), r.memcpys.end(), by_start);
    std::stable_sort(r.memsets.begin(), r.memsets.end(), by_start);
    std::stable_sort(r.api.begin(), r.api.end(), by_start);
    std::stable_sort(r.syncs.begin(), r.syncs.end(), by_start);
    return r;
}

uint64_t CuptiCollector::timestamp() noexcept {
    uint64_t t = 0;
    cuptiGetTimestamp(&t);
    return t;
}

void CUPTIAPI CuptiCollector::buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    Pool& pool = Pool::get();
    std::lock_guard<std::mutex> lock(pool.buffers_mutex);
    *max_records = 0;
    *buffer = nullptr;
    *size = 0;
    if (pool.free_list.empty() && pool.allocated < MAX_BUFFERS) {
        // operator new aligns to 16 bytes; CUPTI needs 8.
        uint8_t* b = new (std::nothrow) uint8_t[BUFFER_BYTES];
        if (!b) return;
        pool.free_list.push_back(b);
        pool.allocated++;
    }
    if (pool.free_list.empty()) return; // pool exhausted: CUPTI drops records and counts them
    *buffer = pool.free_list.back();
    *size = BUFFER_BYTES;
    pool.free_list.pop_back();
}

void CUPTIAPI CuptiCollector::buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid) {
    Pool& pool = Pool::get();
    std::string error;
    Chunk chunk;
    try {
        chunk = parse(buffer, valid);
    } catch (const std::exception& e) {
        error = e.what();
    }
    // Records this buffer's context and stream could not store (count_dropped covers the global queue).
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) != CUPTI_SUCCESS) dropped = 0;
    {
        std::lock_guard<std::mutex> lock(pool.buffers_mutex);
        pool.free_list.push_back(buffer);
    }
    std::lock_guard<std::mutex> lock(pool.records_mutex);
    if (!pool.sink) return;
    if (!error.empty() && pool.sink->callback_error_.empty()) pool.sink->callback_error_ = error;
    pool.sink->rec_.dropped_records += dropped;
    pool.sink->append(std::move(chunk));
}

void CuptiCollector::append(Chunk&& c) {
    auto move_all = [](auto& to, auto& from) {
        to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
    };
    move_all(rec_.kernels, c.rec.kernels);
    move_all(rec_.memcpys, c.rec.memcpys);
    move_all(rec_.memsets, c.rec.memsets);
    move_all(rec_.api, c.rec.api);
    move_all(rec_.syncs, c.rec.syncs);
    rec_.cupti_overhead_ns += c.rec.cupti_overhead_ns;
    for (const auto& [correlation, id] : c.external) external_[correlation] = id;
}

void CUPTIAPI CuptiCollector::graph_node_callback(void* ctx, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                                  const void* data) {
    if (domain != CUPTI_CB_DOMAIN_RESOURCE) return;
    auto* self = static_cast<CuptiCollector*>(ctx);
    const auto* graph = static_cast<const CUpti_GraphData*>(static_cast<const CUpti_ResourceData*>(data)->resourceDescriptor);
    uint64_t node = 0, original = 0;
    if (!graph || !graph->node || cuptiGetGraphNodeId(graph->node, &node) != CUPTI_SUCCESS) return;
    if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
        // Captured on this thread, inside the launch that creates it: the Range open now is the node's.
        if (!self->running_ || self->open_.empty()) return;
        self->graph_nodes_[node] = pack_range_id(self->ranges_[self->open_.back()].where);
    } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) {
        // Instantiation clones every node: replays report the clone's id.
        if (!graph->originalNode || cuptiGetGraphNodeId(graph->originalNode, &original) != CUPTI_SUCCESS) return;
        auto it = self->graph_nodes_.find(original);
        if (it != self->graph_nodes_.end()) self->graph_nodes_[node] = it->second;
    }
}

void CuptiCollector::hook_push(const RangeInfo& info, void* ctx) {
    auto* self = static_cast<CuptiCollector*>(ctx);
    Attribution where{info.subblock, info.phase, info.layer, self->step_};
    // No throw from inside Range's constructor (its NVTX push is done); a failure surfaces at flush().
    CUptiResult r =
        cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, pack_range_id(where));
    if (r != CUPTI_SUCCESS) {
        std::lock_guard<std::mutex> lock(Pool::get().records_mutex);
        if (self->callback_error_.empty())
            self->callback_error_ = strprintf("pushing an external correlation id: %s", cupti_error_string(r));
    }
    int depth = (int)self->open_.size();
    self->open_.push_back(self->ranges_.size());
    self->ranges_.push_back(RangeRecord{info.name, timestamp(), 0, current_thread_id(), depth, where});
}

void CuptiCollector::hook_pop(void* ctx) {
    auto* self = static_cast<CuptiCollector*>(ctx);
    if (self->open_.empty()) return; // a Range opened before start(): CUPTI never saw its id
    uint64_t t = 0, id = 0;
    cuptiGetTimestamp(&t);
    cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
    self->ranges_[self->open_.back()].end_ns = t;
    self->open_.pop_back();
}

void CuptiCollector::count_dropped() {
    size_t dropped = 0;
    CUPTI_CHECK(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped));
    std::lock_guard<std::mutex> lock(Pool::get().records_mutex);
    rec_.dropped_records += dropped;
}

void CuptiCollector::detach_sink() {
    Pool& pool = Pool::get();
    std::lock_guard<std::mutex> lock(pool.records_mutex);
    if (pool.sink == this) pool.sink = nullptr;
}

void CuptiCollector::rethrow_callback_error() {
    std::string e;
    {
        std::lock_guard<std::mutex> lock(Pool::get().records_mutex);
        e.swap(callback_error_);
    }
    if (!e.empty()) throw Error("profiler: reading CUPTI records: " + e);
}

void CuptiCollector::shutdown() noexcept {
    if (running_) {
        running_ = false;
        range_hook() = RangeHook{};
        for (int i = 0; i < enabled_kinds_; i++) cuptiActivityDisable(KINDS[i]);
        cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    }
    unsubscribe();
    detach_sink();
}

void CuptiCollector::unsubscribe() noexcept {
    if (subscriber_) cuptiUnsubscribe(subscriber_);
    subscriber_ = nullptr;
}

} // namespace llmc::prof
