// The flat units of ZeRO, shared by the zero layout and hybrid's ZeRO-1: a layer's parameters laid
// out in one flat vector, the chunk of it a rank owns (exercise 08's owned_chunk, checked against
// the collectives' cut), and that chunk's slices as parameters the optimizer updates.
#include <algorithm>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "core/model/init.h"
#include "core/parallel/zero.h"

namespace mgpu::parallel {

namespace {

// The collectives cut every tensor by comm::chunk_range; an owned chunk cut otherwise would update
// elements whose averaged gradient never arrives here.
void check_chunk(const ZeroUnit& u, int ranks, int rank) {
  if (std::pair{u.begin, u.end} != comm::chunk_range(u.numel, ranks, rank))
    throw std::logic_error(fmt::format(
        "owned_chunk({}, {}, {}) returned [{}, {}) but the collectives give rank {} [{}, {})",
        u.numel, ranks, rank, u.begin, u.end, rank, comm::chunk_range(u.numel, ranks, rank).first,
        comm::chunk_range(u.numel, ranks, rank).second));
}

// Memory tags of the transient tensors: the gathered units of stage 3 and the gradient buckets
// of stages 2-3 exist only while their layer computes or communicates; the lessons name them.
constexpr MemCategory kTransient = MemCategory::comm_buffers;

void drop_params(ZeroUnit& u, bool grads) {
  for (Param* p : u.params) (grads ? p->grad : p->data) = Tensor();
}

}  // namespace

// ---------------------------------------------------------------------------------- shared with
// hybrid's ZeRO-1: a unit's flat layout, my slices of it, and their map into the full model

void view_params(ZeroUnit& u, Tensor flat, bool grads) {
  for (size_t i = 0; i < u.params.size(); ++i) {
    Tensor view =
        flat.flat_range(u.offsets[i], u.offsets[i] + shape_numel(u.shapes[i])).reshape(u.shapes[i]);
    (grads ? u.params[i]->grad : u.params[i]->data) = view;
  }
}

ZeroUnit plan_unit(ParamList params, int ranks, int rank, const OwnedChunkFn& owned_chunk) {
  ZeroUnit u;
  u.params = std::move(params);
  for (Param* p : u.params) {
    u.offsets.push_back(u.numel);
    u.shapes.push_back(p->shape);
    u.numel += shape_numel(p->shape);
  }
  std::tie(u.begin, u.end) = owned_chunk(u.numel, ranks, rank);
  check_chunk(u, ranks, rank);
  return u;
}

void append_owned_slices(const ZeroUnit& u, const Tensor& data, const Tensor& grad,
                         std::vector<OwnedSlice>& out) {
  // A tensor holding only the owned chunk starts at the chunk's first element.
  const int64_t data_base = data.numel() == u.numel ? 0 : u.begin;
  const int64_t grad_base = grad.numel() == u.numel ? 0 : u.begin;
  for (size_t i = 0; i < u.params.size(); ++i) {
    const int64_t first = u.offsets[i], last = first + shape_numel(u.shapes[i]);
    const int64_t lo = std::max(first, u.begin), hi = std::min(last, u.end);
    if (lo >= hi) continue;
    OwnedSlice s{u.params[i], u.shapes[i], lo - first, hi - first, std::make_unique<Param>()};
    s.shard->name = u.params[i]->name;
    s.shard->shape = {hi - lo};
    s.shard->spec = u.params[i]->spec.chunk(lo - first, hi - first);
    s.shard->data = data.flat_range(lo - data_base, hi - data_base);
    s.shard->grad = grad.flat_range(lo - grad_base, hi - grad_base);
    out.push_back(std::move(s));
  }
}

ParamList owned_params(const std::vector<OwnedSlice>& owned) {
  ParamList params;
  for (const OwnedSlice& s : owned) params.push_back(s.shard.get());
  return params;
}

// ---------------------------------------------------------------------------------- a unit's life
// in a step: materialised whole or as my chunk; stage 3 gathered around its compute; stages 2-3
// a gradient bucket reduce-scattered into my chunk

void materialise_unit(ZeroUnit& u, uint64_t seed, DType dtype) {
  u.flat_params = Tensor::empty({u.numel}, MemCategory::parameters, dtype);
  view_params(u, u.flat_params, /*grads=*/false);
  for (Param* p : u.params)
    write_initial_values(*p, seed, 0, p->data.numel(), p->data.reshape({p->data.numel()}));
}

void materialise_chunk(ZeroUnit& u, uint64_t seed, DType dtype) {
  u.param_shard = Tensor::empty({u.end - u.begin}, MemCategory::parameters, dtype);
  for (size_t i = 0; i < u.params.size(); ++i) {
    const int64_t first = u.offsets[i], last = first + shape_numel(u.shapes[i]);
    const int64_t lo = std::max(first, u.begin), hi = std::min(last, u.end);
    if (lo < hi)
      write_initial_values(*u.params[i], seed, lo - first, hi - first,
                           u.param_shard.flat_range(lo - u.begin, hi - u.begin));
  }
}

void gather_unit(ZeroUnit& u, comm::Comm& dp, DType dtype) {
  if (u.gathered.defined()) return;  // prefetched already
  u.gathered = Tensor::empty({u.numel}, kTransient, dtype);
  u.gathering = dp.all_gather_async(u.param_shard, u.gathered);
}

void attach_unit(ZeroUnit& u) {
  u.gathering.wait();
  view_params(u, u.gathered, /*grads=*/false);
}

void release_unit(ZeroUnit& u) {
  drop_params(u, /*grads=*/false);
  u.gathered = Tensor();
}

void open_bucket(ZeroUnit& u) {
  u.bucket = Tensor::zeros({u.numel}, kTransient);
  view_params(u, u.bucket, /*grads=*/true);
}

void reduce_scatter_bucket(ZeroUnit& u, comm::Comm& dp) {
  u.reducing = dp.reduce_scatter_async(u.bucket, u.grad_shard, comm::ReduceOp::avg);
  drop_params(u, /*grads=*/true);
}

void finish_reductions(std::vector<ZeroUnit>& units) {
  for (ZeroUnit& u : units) {
    u.reducing.wait();
    u.bucket = Tensor();
  }
}

void gather_updated_params(std::vector<ZeroUnit>& units, comm::Comm& dp, DType dtype) {
  // Each rank's updated chunk, to every rank. (The chunk is copied out first: it is a view
  // into the very tensor the all-gather writes.)
  std::vector<Tensor> chunks;
  chunks.reserve(units.size());  // alive, and in place, until every all-gather is done
  for (ZeroUnit& u : units) {
    chunks.push_back(Tensor::empty({u.end - u.begin}, kTransient, dtype));
    chunks.back().copy_from(u.flat_params.flat_range(u.begin, u.end));
    u.gathering = dp.all_gather_async(chunks.back(), u.flat_params);
  }
  for (ZeroUnit& u : units) u.gathering.wait();
}

// ---------------------------------------------------------------------------------- seams

void check_seams(const ZeroSeams& seams) {
  for (const auto& [name, present] : {std::pair{"owned_chunk", bool(seams.owned_chunk)},
                                      std::pair{"sharded_step", bool(seams.sharded_step)}})
    if (!present)
      throw std::logic_error(fmt::format(
          "ZeRO seam '{}' is missing: pass exercise 08's table (reference::seams().zero or "
          "mine::seams().zero)",
          name));
}

}  // namespace mgpu::parallel
