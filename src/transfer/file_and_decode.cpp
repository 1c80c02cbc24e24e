// The transfer engine's submissions from files and of compressed weights: submit_from_file (reads
// through bounce buffers), submit_decode and submit_decode_from_file (pieces copied into HBM
// staging and decoded), and the buffers they prepare. See Note [Transfer engine] in
// include/htp/transfer_engine.hpp.
#include <htp/detail/file_checks.hpp>
#include "transfer/engine_impl.hpp"

namespace htp {

transfer_ticket transfer_engine::submit_from_file(
    void* dst, std::shared_ptr<const tensor_file> file, std::uint64_t offset, std::size_t bytes,
    transfer_priority priority, std::vector<event_ref> after,
    std::shared_ptr<const std::vector<std::uint64_t>> chunk_checksums) {
  HTP_EXPECTS(dst != nullptr, invalid_argument,
              "transfer_engine::submit_from_file: null destination");
  detail::check_file_source(file.get(), offset, bytes, impl_->dev.properties().timing_only,
                            "transfer_engine::submit_from_file");
  const auto pi = static_cast<std::size_t>(priority);
  HTP_EXPECTS(pi < transfer_priority_count, invalid_argument,
              "transfer_engine::submit_from_file: unknown priority ", pi);
  impl_->check_region(dst, bytes, copy_direction::host_to_device, /*source=*/false);
  const std::size_t chunks = (bytes + impl_->cfg.chunk_bytes - 1) / impl_->cfg.chunk_bytes;
  HTP_EXPECTS(chunk_checksums == nullptr || chunk_checksums->size() == chunks, invalid_argument,
              "transfer_engine::submit_from_file: ", chunk_checksums ? chunk_checksums->size() : 0,
              " chunk checksums for a request of ", chunks, " chunks of ", impl_->cfg.chunk_bytes,
              " bytes; give one per chunk as the engine cuts the range");
  prepare_file_reads();
  auto r = std::make_shared<request>();
  r->dst = static_cast<char*>(dst);
  r->bytes = bytes;
  r->direction = copy_direction::host_to_device;
  r->priority = priority;
  r->chunk_count = chunks;
  if (impl_->cfg.verify_page_ins && !impl_->dev.properties().timing_only)
    r->chunk_checksums = std::move(chunk_checksums);
  r->after = std::move(after);
  r->file = std::move(file);
  r->file_offset = offset;
  return impl_->enqueue(std::move(r), "submit_from_file");
}

void transfer_engine::prepare_file_reads() {
  // Pinned allocations are slow and may synchronise the device: made here, with no engine lock.
  auto& p = *impl_;
  std::lock_guard b(p.bounce_mutex_);
  if (!p.bounce_all.empty()) return;
  std::vector<char*> made;
  std::map<const char*, event> copied;
  std::unique_ptr<stream> verify;
  try {
    for (std::size_t i = 0; i < p.cfg.max_in_flight_chunks; ++i) {
      made.push_back(
          static_cast<char*>(p.dev.allocate(memory_kind::pinned_host, p.bounce_alloc_bytes())));
      copied.emplace(made.back(), event(p.dev));
    }
    verify = std::make_unique<stream>(p.dev);
  } catch (...) {
    for (char* m : made) p.dev.deallocate(memory_kind::pinned_host, m, p.bounce_alloc_bytes());
    throw;
  }
  std::lock_guard lock(p.mutex_);
  p.bounce_all = made;
  p.bounce_copied = std::move(copied);
  p.verify_stream = std::move(verify);
  p.lanes[0]->bounce_free = std::move(made);
}

void transfer_engine::prepare_decode() {
  auto& p = *impl_;
  std::lock_guard b(p.decode_mutex_);
  if (p.decode_stream) return;
  auto made_stream = std::make_unique<stream>(p.dev);
  std::vector<decode_slot> made;
  const std::size_t status_bytes = p.cfg.max_in_flight_chunks * sizeof(std::uint32_t);
  std::uint32_t* status = nullptr;
  const auto undo = [&] {
    for (auto& d : made) {
      if (d.buf != nullptr) p.dev.deallocate(memory_kind::device, d.buf, p.cfg.chunk_bytes);
      if (d.t0) p.dev.destroy_event(d.t0);
      if (d.t1) p.dev.destroy_event(d.t1);
    }
    if (status != nullptr) p.dev.deallocate(memory_kind::pinned_host, status, status_bytes);
  };
  try {
    status = static_cast<std::uint32_t*>(p.dev.allocate(memory_kind::pinned_host, status_bytes));
    for (std::size_t i = 0; i < p.cfg.max_in_flight_chunks; ++i) {
      made.emplace_back();
      decode_slot& d = made.back();
      d.buf = static_cast<char*>(p.dev.allocate(memory_kind::device, p.cfg.chunk_bytes));
      d.copied = event(p.dev);
      d.t0 = p.dev.create_timed_event();
      d.t1 = p.dev.create_timed_event();
      d.status = status + i;
    }
  } catch (...) {
    undo();
    throw;
  }
  std::lock_guard lock(p.mutex_);
  p.decode_status_words = status;
  p.decode_status_bytes = status_bytes;
  p.decode_slots = std::move(made);
  for (std::size_t i = 0; i < p.decode_slots.size(); ++i)
    p.decode_free.push_back(static_cast<int>(i));
  p.decode_stream = std::move(made_stream);
}

request_ptr transfer_engine::impl::decode_request(void* dst,
                                                  const std::shared_ptr<const coded_layout>& layout,
                                                  transfer_priority priority,
                                                  std::vector<event_ref> after, const char* call) {
  HTP_EXPECTS(dst != nullptr && layout != nullptr && !layout->pieces.empty(), invalid_argument,
              "transfer_engine::", call,
              ": needs a destination and a layout of at least one piece");
  const auto pi = static_cast<std::size_t>(priority);
  HTP_EXPECTS(pi < transfer_priority_count, invalid_argument, "transfer_engine::", call,
              ": unknown priority ", pi);
  for (std::size_t i = 0; i < layout->pieces.size(); ++i) {
    const coded_piece& c = layout->pieces[i];
    HTP_EXPECTS(c.wire_bytes > 0 && c.wire_bytes <= cfg.chunk_bytes &&
                    c.decoded_offset + c.decoded_bytes <= layout->decoded_bytes &&
                    c.wire_offset + c.wire_bytes <= layout->wire_bytes,
                invalid_argument, "transfer_engine::", call, ": piece ", i, " (", c.wire_bytes,
                " wire bytes at ", c.wire_offset, ", ", c.decoded_bytes, " decoded at ",
                c.decoded_offset,
                ") is empty, outside its layout, or larger than a staging buffer "
                "(transfer_config.chunk_bytes = ",
                cfg.chunk_bytes, "); encode with smaller chunks");
  }
  check_region(dst, layout->decoded_bytes, copy_direction::host_to_device, /*source=*/false);
  auto r = std::make_shared<request>();
  r->dst = static_cast<char*>(dst);
  r->bytes = layout->wire_bytes;
  r->direction = copy_direction::host_to_device;
  r->priority = priority;
  r->chunk_count = layout->pieces.size();
  r->after = std::move(after);
  r->coded = layout;
  return r;
}

transfer_ticket transfer_engine::submit_decode(void* dst, const void* src,
                                               std::shared_ptr<const coded_layout> layout,
                                               transfer_priority priority,
                                               std::vector<event_ref> after) {
  request_ptr r = impl_->decode_request(dst, layout, priority, std::move(after), "submit_decode");
  HTP_EXPECTS(src != nullptr, invalid_argument, "transfer_engine::submit_decode: null source");
  impl_->check_region(src, layout->wire_bytes, copy_direction::host_to_device, /*source=*/true);
  prepare_decode();
  r->src = static_cast<const char*>(src);
  return impl_->enqueue(std::move(r), "submit_decode");
}

transfer_ticket transfer_engine::submit_decode_from_file(void* dst,
                                                         std::shared_ptr<const tensor_file> file,
                                                         std::uint64_t offset,
                                                         std::shared_ptr<const coded_layout> layout,
                                                         transfer_priority priority,
                                                         std::vector<event_ref> after) {
  request_ptr r =
      impl_->decode_request(dst, layout, priority, std::move(after), "submit_decode_from_file");
  detail::check_file_source(file.get(), offset, layout->wire_bytes,
                            impl_->dev.properties().timing_only,
                            "transfer_engine::submit_decode_from_file");
  prepare_file_reads();
  prepare_decode();
  r->file = std::move(file);
  r->file_offset = offset;
  return impl_->enqueue(std::move(r), "submit_decode_from_file");
}

}  // namespace htp

namespace htp {

transfer_ticket transfer_engine::submit_load(void* dst, const tensor_source& src,
                                             transfer_priority priority,
                                             std::vector<event_ref> after) {
  switch (src.place) {
    case source_place::none: break;
    case source_place::file:
      if (src.coded)
        return submit_decode_from_file(dst, src.file, src.file_offset, src.coded, priority,
                                       std::move(after));
      return submit_from_file(dst, src.file, src.file_offset, src.bytes, priority, std::move(after),
                              src.chunk_checksums);
    case source_place::pinned_tier:
    case source_place::caller_memory:
      if (src.coded) return submit_decode(dst, src.host, src.coded, priority, std::move(after));
      return submit(dst, src.host, src.bytes, copy_direction::host_to_device, priority,
                    std::move(after));
  }
  throw invalid_argument(
      "transfer_engine::submit_load: the source holds no bytes (source_place::none: a "
      "device-resident tensor has no host copy to load from)");
}

}  // namespace htp
