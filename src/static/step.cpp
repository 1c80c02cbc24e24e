// htp::static_step: the step program of a static plan (static_step.hpp).
#include "log.hpp"
#include "plan_internal.hpp"

#include <htp/detail/check.hpp>
#include <htp/error.hpp>
#include <htp/static_step.hpp>
#include <htp/token_bucket.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

namespace htp {

struct static_step::impl {
  device& dev;
  static_plan_input in;
  static_plan plan;
  std::vector<const void*> sources;
  std::byte* arena = nullptr;
  stream prefetch, decode;
  event fork, prefetch_tail, decode_tail;
  std::vector<event> done;                         // per position: its compute has finished
  std::vector<event> copied_in, decoded_in;        // per use: its raw copies / decodes are done
  std::vector<event> piece_copied, piece_decoded;  // per coded piece of a step
  std::vector<std::size_t> piece_tensor;           // per coded piece: its tensor
  std::uint32_t* status = nullptr;                 // per coded piece: its decode's status word
  std::size_t pieces = 0;                          // coded pieces a step loads
  std::size_t next_position = 0;                   // the position begin() expects
  bool inside = false;                             // between begin(next_position) and its end
  std::size_t piece = 0;                           // coded pieces issued so far this step

  impl(device& d, const static_plan_input& input, static_plan p, std::vector<const void*> s)
      : dev(d), in(input), plan(std::move(p)), sources(std::move(s)), prefetch(d), decode(d),
        fork(d), prefetch_tail(d), decode_tail(d) {}

  std::byte* at(std::size_t offset) const { return arena + offset; }
  bool has(const static_use& use, bool coded) const {
    return std::any_of(use.tensors.begin(), use.tensors.end(),
                       [&](std::size_t t) { return in.tensors[t].coded() == coded; });
  }
  void make_events();
  /// A step left part way (a forward that raised): waits for its work, loads what a step starts
  /// with again and starts over. Not inside a capture (htp::logic_error).
  void recover(stream_ref compute);
  void prime();
  void issue_load(std::size_t u, event_ref freed);
  void load_now(std::size_t t, std::size_t offset, std::vector<std::string>& failed);
};

void static_step::impl::make_events() {
  for (std::size_t p = 0; p < in.positions.size(); ++p) done.emplace_back(dev);
  for (std::size_t u = 0; u < plan.uses.size(); ++u) {
    copied_in.emplace_back(dev);
    decoded_in.emplace_back(dev);
  }
  for (const auto& loads : plan.loads_after) {  // pieces are numbered in issue order
    for (const std::size_t u : loads) {
      for (const std::size_t t : plan.uses[u].tensors) {
        if (in.tensors[t].coded()) piece_tensor.push_back(t);
      }
    }
  }
  pieces = piece_tensor.size();
  for (std::size_t n = 0; n < pieces; ++n) {
    piece_copied.emplace_back(dev);
    piece_decoded.emplace_back(dev);
  }
  if (pieces != 0) {
    status = static_cast<std::uint32_t*>(
        dev.allocate(memory_kind::pinned_host, pieces * sizeof(std::uint32_t)));
    std::fill(status, status + pieces, 0u);
  }
}

// Raw tensors copy straight into the ring once its bytes are free; coded ones copy into the next
// wire buffer once the decode two pieces back has emptied it, and decode once the bytes are free.
void static_step::impl::issue_load(std::size_t u, event_ref freed) {
  const static_use& use = plan.uses[u];
  if (has(use, true)) dev.wait(freed, decode);
  bool prefetch_waited = false;  // just before the first raw copy: coded copies need not wait
  for (std::size_t i = 0; i < use.tensors.size(); ++i) {
    const std::size_t t = use.tensors[i];
    const static_tensor& x = in.tensors[t];
    if (!x.coded()) {
      if (!prefetch_waited) dev.wait(freed, prefetch);
      prefetch_waited = true;
      dev.copy_async(at(use.offsets[i]), sources[t], x.bytes, copy_direction::host_to_device,
                     prefetch);
      continue;
    }
    const std::size_t n = piece++;
    HTP_ASSERT(n < pieces, "more coded pieces issued in a step than the plan has");
    std::byte* wire = at(plan.wire_offset + (n % 2) * plan.wire_buffer_bytes);
    if (n >= 2) dev.wait(piece_decoded[n - 2], prefetch);
    dev.copy_async(wire, sources[t], x.wire_bytes, copy_direction::host_to_device, prefetch);
    piece_copied[n].record(prefetch);
    dev.wait(piece_copied[n], decode);
    dev.decode_weights_async(wire, x.wire_bytes, at(use.offsets[i]), x.bytes, status + n, decode);
    piece_decoded[n].record(decode);
  }
  if (use.carried) return;  // the next step's: the join at the step's end covers it
  if (has(use, false)) copied_in[u].record(prefetch);
  if (has(use, true)) decoded_in[u].record(decode);
}

// One tensor into HBM now, on the prefetch stream (prime): a copy, or a copy and a verified
// decode through wire buffer 0 (the arena holds wire buffers for the streamed tensors only, so a
// resident coded tensor larger than them goes through a temporary device buffer: set-up only).
void static_step::impl::load_now(std::size_t t, std::size_t offset,
                                 std::vector<std::string>& failed) {
  const static_tensor& x = in.tensors[t];
  if (!x.coded()) {
    dev.copy_async(at(offset), sources[t], x.bytes, copy_direction::host_to_device, prefetch);
    return;
  }
  const bool fits = x.wire_bytes <= plan.wire_buffer_bytes;
  void* staging = fits ? at(plan.wire_offset) : dev.allocate(memory_kind::device, x.wire_bytes);
  void* word = nullptr;
  auto release = [&]() noexcept {
    try {
      prefetch.synchronize();
    } catch (...) {  // the failure is what the caller rethrows or reports
    }
    if (word != nullptr) dev.deallocate(memory_kind::pinned_host, word, 4);
    if (!fits) dev.deallocate(memory_kind::device, staging, x.wire_bytes);
  };
  try {
    word = dev.allocate(memory_kind::pinned_host, 4);
    *static_cast<std::uint32_t*>(word) = 0;
    dev.copy_async(staging, sources[t], x.wire_bytes, copy_direction::host_to_device, prefetch);
    dev.decode_weights_async(staging, x.wire_bytes, at(offset), x.bytes,
                             static_cast<std::uint32_t*>(word), prefetch);
    prefetch.synchronize();
  } catch (...) {
    release();
    throw;
  }
  if (*static_cast<std::uint32_t*>(word) != 0) failed.push_back(x.name);
  release();
}

namespace {

/// Every offset the plan gives lies inside its arena with the tensor's bytes, and every streamed
/// coded tensor fits a wire buffer: a plan made from another input is refused, not followed.
void check_layout(const static_plan_input& in, const static_plan& plan) {
  const auto inside = [&](std::size_t t, std::size_t offset) {
    HTP_EXPECTS(offset <= plan.arena_bytes && in.tensors[t].bytes <= plan.arena_bytes - offset,
                invalid_argument, "static_step: the plan puts tensor '", in.tensors[t].name,
                "' at ", offset, " of an arena of ", plan.arena_bytes,
                " bytes: it was not made from this input");
  };
  for (std::size_t t = 0; t < in.tensors.size(); ++t) {
    if (plan.resident_offset[t] != static_plan::npos) inside(t, plan.resident_offset[t]);
  }
  for (const auto& use : plan.uses) {
    HTP_EXPECTS(use.tensors.size() == use.offsets.size(), invalid_argument,
                "static_step: a use of the plan lists ", use.tensors.size(), " tensors and ",
                use.offsets.size(), " offsets");
    for (std::size_t i = 0; i < use.tensors.size(); ++i) {
      HTP_EXPECTS(use.tensors[i] < in.tensors.size(), invalid_argument,
                  "static_step: the plan names tensor ", use.tensors[i], " of ", in.tensors.size());
      inside(use.tensors[i], use.offsets[i]);
      const auto& x = in.tensors[use.tensors[i]];
      HTP_EXPECTS(!x.coded() || (use.freed_by < 0 && !use.carried) ||
                      x.wire_bytes <= plan.wire_buffer_bytes,
                  invalid_argument, "static_step: the plan's wire buffers (",
                  plan.wire_buffer_bytes, " bytes) cannot hold '", x.name, "' (", x.wire_bytes,
                  ")");
    }
  }
}

}  // namespace

static_step::static_step(device& dev, const static_plan_input& in, static_plan plan,
                         std::vector<const void*> sources) {
  static_detail::check_input(in);
  HTP_EXPECTS(
      plan.use_at.size() == in.positions.size() && plan.resident_offset.size() == in.tensors.size(),
      invalid_argument, "static_step: the plan was made for ", plan.use_at.size(),
      " positions and ", plan.resident_offset.size(), " tensors; the input has ",
      in.positions.size(), " and ", in.tensors.size());
  HTP_EXPECTS(sources.size() == in.tensors.size(), invalid_argument,
              "static_step: ", sources.size(), " sources for ", in.tensors.size(), " tensors");
  check_layout(in, plan);
  const auto referenced = static_detail::referenced(in);
  for (std::size_t t = 0; t < in.tensors.size(); ++t) {
    HTP_EXPECTS(!referenced[t] || sources[t] != nullptr, invalid_argument, "static_step: tensor '",
                in.tensors[t].name, "' is read but has no source");
  }
  impl_ = std::make_unique<impl>(dev, in, std::move(plan), std::move(sources));
  auto& s = *impl_;
  if (s.plan.arena_bytes != 0) {
    s.arena = static_cast<std::byte*>(dev.allocate(memory_kind::device, s.plan.arena_bytes));
  }
  try {
    s.make_events();
  } catch (...) {
    if (s.arena != nullptr) dev.deallocate(memory_kind::device, s.arena, s.plan.arena_bytes);
    throw;
  }
}

static_step::~static_step() {
  auto& s = *impl_;
  try {
    s.prefetch.synchronize();
    s.decode.synchronize();
  } catch (...) {  // a failed step's error was reported where it was synchronized
  }
  try {
    if (s.status != nullptr) {
      s.dev.deallocate(memory_kind::pinned_host, s.status, s.pieces * sizeof(std::uint32_t));
    }
    if (s.arena != nullptr) s.dev.deallocate(memory_kind::device, s.arena, s.plan.arena_bytes);
  } catch (...) {  // a destructor cannot throw; the device reported its failure already
  }
}

void static_step::prime() { impl_->prime(); }

void static_step::impl::recover(stream_ref compute) {
  HTP_EXPECTS(!dev.is_capturing(compute), logic_error, "static_step: the last step stopped at ",
              "position ", next_position,
              " (a forward that raised?), and a capture cannot "
              "start over; end the capture, run one step outside it, and capture again");
  detail::logger().warn(
      "static_step: the last step stopped at position {}; loading what a step starts with "
      "again",
      next_position);
  dev.synchronize(compute);
  prefetch.synchronize();
  decode.synchronize();
  inside = false;
  next_position = 0;
  prime();
}

void static_step::impl::prime() {
  auto& s = *this;
  std::vector<std::string> failed;
  for (std::size_t t = 0; t < s.in.tensors.size(); ++t) {
    if (s.plan.resident_offset[t] != static_plan::npos) {
      s.load_now(t, s.plan.resident_offset[t], failed);
    }
  }
  for (const auto& use : s.plan.uses) {
    if (use.freed_by >= 0 && !use.carried) continue;
    for (std::size_t i = 0; i < use.tensors.size(); ++i) {
      s.load_now(use.tensors[i], use.offsets[i], failed);
    }
  }
  s.prefetch.synchronize();
  HTP_EXPECTS(failed.empty(), corrupt_data, "static_step::prime: the coded frame of '",
              failed.front(), "' failed its checks (", failed.size(),
              " tensor(s) in all): its stored bytes are damaged; re-encode them");
}

void* static_step::address(std::size_t t, std::size_t p) const {
  return impl_->at(impl_->plan.offset_of(t, p));
}

void static_step::begin(std::size_t p, stream_ref compute) {
  auto& s = *impl_;
  if (p == 0 && (s.inside || s.next_position != 0)) s.recover(compute);
  HTP_EXPECTS(!s.inside && p == s.next_position && p < s.in.positions.size(), logic_error,
              "static_step::begin(", p, "): position ", s.next_position,
              " is next (positions are entered in order, each begin followed by its end)");
  if (p == 0) {
    s.fork.record(compute);
    s.dev.wait(s.fork, s.prefetch);
    s.dev.wait(s.fork, s.decode);
    s.piece = 0;
  }
  s.inside = true;
  const std::ptrdiff_t u = s.plan.use_at[p];
  if (u < 0) return;
  const static_use& use = s.plan.uses[static_cast<std::size_t>(u)];
  if (use.freed_by < 0 || use.carried) return;  // in the ring since the step began
  if (s.has(use, false)) s.dev.wait(s.copied_in[static_cast<std::size_t>(u)], compute);
  if (s.has(use, true)) s.dev.wait(s.decoded_in[static_cast<std::size_t>(u)], compute);
}

void static_step::end(std::size_t p, stream_ref compute) {
  auto& s = *impl_;
  HTP_EXPECTS(s.inside && p == s.next_position, logic_error, "static_step::end(", p,
              "): ", s.inside ? "position " : "no position is begun; ", s.next_position,
              s.inside ? " is the one begun" : " is next");
  s.inside = false;
  if (!s.plan.loads_after[p].empty()) {
    s.done[p].record(compute);
    for (const std::size_t u : s.plan.loads_after[p]) s.issue_load(u, s.done[p]);
  }
  s.next_position = p + 1;
  if (s.next_position < s.in.positions.size()) return;
  s.prefetch_tail.record(s.prefetch);
  s.decode_tail.record(s.decode);
  s.dev.wait(s.prefetch_tail, compute);
  s.dev.wait(s.decode_tail, compute);
  s.next_position = 0;
}

void static_step::run(stream_ref compute,
                      const std::function<void(std::size_t, stream_ref)>& kernels) {
  for (std::size_t p = 0; p < impl_->in.positions.size(); ++p) {
    begin(p, compute);
    if (kernels) kernels(p, compute);
    end(p, compute);
  }
}

graph static_step::capture(stream_ref compute,
                           const std::function<void(std::size_t, stream_ref)>& kernels) {
  auto& s = *impl_;
  s.dev.begin_capture(compute);
  try {
    run(compute, kernels);
  } catch (...) {
    s.next_position = 0;
    s.inside = false;
    try {
      graph discard(s.dev, s.dev.end_capture(compute));
    } catch (...) {  // the capture failed too: the first error is the one to report
    }
    throw;
  }
  return graph(s.dev, s.dev.end_capture(compute));
}

void static_step::launch(const graph& g, stream_ref compute, token_bucket* budget) {
  auto& s = *impl_;
  for (std::uint64_t left = budget ? s.plan.streamed_bytes : 0; left > 0;) {
    const std::uint64_t take =
        std::min<std::uint64_t>(left, std::max<std::uint64_t>(budget->burst(), 1));
    if (budget->try_take(take)) {
      left -= take;
      continue;
    }
    std::this_thread::sleep_for(std::chrono::nanoseconds(budget->time_until_available(take)));
  }
  s.dev.launch_graph(g.ref(), compute);
}

std::vector<std::string> static_step::take_decode_failures() {
  auto& s = *impl_;
  std::vector<std::string> out;
  for (std::size_t n = 0; n < s.pieces; ++n) {
    if (s.status[n] == 0) continue;
    out.push_back(s.in.tensors[s.piece_tensor[n]].name);
    s.dev.write_value(s.status + n, 0);
  }
  return out;
}

const static_plan& static_step::plan() const noexcept { return impl_->plan; }

}  // namespace htp
