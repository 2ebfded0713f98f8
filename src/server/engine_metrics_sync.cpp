#include "server/engine_metrics_sync.h"

namespace hearth::server {

void EngineMetricsSync::apply(ServerMetrics& metrics, const engine::EngineStats& s) {
  metrics.requests_running.set(s.running);
  metrics.requests_waiting.set(s.waiting);
  metrics.kv_blocks_used.set(s.kv_blocks_used);
  metrics.kv_blocks_cached.set(s.kv_blocks_cached);
  metrics.kv_blocks_total.set(s.kv_blocks_total);
  metrics.state_snapshots.set(s.state_snapshots);
  // Two scrapes may race: each adds only what is new since the highest value seen
  // (an older snapshot taking the lock last must not move the mark back).
  std::lock_guard<std::mutex> lock(mu_);
  auto advance = [](Counter& c, uint64_t now, uint64_t& seen) {
    if (now > seen) {
      c.inc(double(now - seen));
      seen = now;
    }
  };
  advance(metrics.prefix_cache_queries, s.prefix_query_tokens, seen_queries_);
  advance(metrics.prefix_cache_hits, s.prefix_hit_tokens, seen_hits_);
  advance(metrics.requests_admitted, s.admitted, seen_admitted_);
  advance(metrics.preemptions, s.preemptions, seen_preemptions_);
  advance(metrics.spec_drafted, s.spec_drafted, seen_spec_drafted_);
  advance(metrics.spec_accepted, s.spec_accepted, seen_spec_accepted_);
  const engine::kvdisk::DiskStats& d = s.kv_disk_stats;
  metrics.kv_disk_blocks.set(static_cast<double>(d.kv_files));
  metrics.kv_disk_snapshots.set(static_cast<double>(d.state_files));
  metrics.kv_disk_bytes.set(static_cast<double>(d.bytes_on_disk));
  metrics.kv_disk_disabled.set(d.disabled ? 1 : 0);
  advance(metrics.kv_disk_hits, d.files_read, seen_disk_hits_);
  advance(metrics.kv_disk_read_bytes, d.bytes_read, seen_disk_read_);
  advance(metrics.kv_disk_written_bytes, d.bytes_written, seen_disk_written_);
  advance(metrics.kv_disk_writes, d.files_written, seen_disk_writes_);
  advance(metrics.kv_disk_writes_dropped, d.writes_dropped, seen_disk_dropped_);
  advance(metrics.kv_disk_rejected, d.files_rejected, seen_disk_rejected_);
  const engine::SwapStats& w = s.kv_swap;
  advance(metrics.kv_swap_out, w.swapped_out, seen_swap_.swapped_out);
  advance(metrics.kv_swap_in, w.swapped_in, seen_swap_.swapped_in);
  advance(metrics.kv_swap_out_bytes, w.bytes_out, seen_swap_.bytes_out);
  advance(metrics.kv_swap_in_bytes, w.bytes_in, seen_swap_.bytes_in);
  advance(metrics.kv_preempt_recomputed, w.recomputed, seen_swap_.recomputed);
  advance(metrics.kv_swap_no_room, w.recompute_no_room, seen_swap_.recompute_no_room);
  advance(metrics.kv_swap_cheaper, w.recompute_cheaper, seen_swap_.recompute_cheaper);
  if (w.seconds > seen_swap_.seconds) {
    metrics.kv_swap_seconds.inc(w.seconds - seen_swap_.seconds);
    seen_swap_.seconds = w.seconds;
  }
  metrics.kv_swap_bytes.set(static_cast<double>(w.bytes_held));
  metrics.kv_swap_capacity.set(static_cast<double>(w.capacity));
  metrics.kv_swap_bandwidth.set(w.copy_bytes_per_s);
  metrics.kv_swap_prefill_speed.set(w.prefill_tokens_per_s);
  advance(metrics.kv_swap_disk_out, w.disk_out, seen_swap_.disk_out);
  advance(metrics.kv_swap_disk_in, w.disk_in, seen_swap_.disk_in);
  advance(metrics.kv_swap_disk_out_bytes, w.disk_bytes_out, seen_swap_.disk_bytes_out);
  advance(metrics.kv_swap_disk_in_bytes, w.disk_bytes_in, seen_swap_.disk_bytes_in);
  advance(metrics.kv_swap_disk_fallbacks, w.disk_fallbacks, seen_swap_.disk_fallbacks);
  metrics.kv_swap_disk_bytes.set(static_cast<double>(w.disk_bytes_held));
  metrics.kv_swap_disk_capacity.set(static_cast<double>(w.disk_capacity));
  metrics.kv_swap_disk_read_speed.set(w.disk_read_bytes_per_s);
  const engine::StepTimes& st = s.step_times;
  advance(metrics.engine_steps, st.steps, seen_steps_.steps);
  auto advance_s = [](Counter& c, double now, double& seen) {
    if (now > seen) {
      c.inc(now - seen);
      seen = now;
    }
  };
  advance_s(metrics.step_forward, st.forward, seen_steps_.forward);
  advance_s(metrics.step_between, st.between, seen_steps_.between);
  advance_s(metrics.step_plan, st.plan, seen_steps_.plan);
  advance_s(metrics.step_prepare, st.prepare, seen_steps_.prepare);
  advance_s(metrics.step_sample, st.sample, seen_steps_.sample);
  advance_s(metrics.step_stream, st.stream, seen_steps_.stream);
  advance_s(metrics.step_finish, st.finish, seen_steps_.finish);
  advance(metrics.decode_steps, st.decode_steps, seen_steps_.decode_steps);
  advance(metrics.decode_rows, st.decode_rows, seen_steps_.decode_rows);
  advance_s(metrics.decode_forward, st.decode_forward, seen_steps_.decode_forward);
  advance_s(metrics.decode_host, st.decode_host, seen_steps_.decode_host);
}

}  // namespace hearth::server
