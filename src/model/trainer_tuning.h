// Benchmark knobs of the Trainer that are not part of its API (bench/bench_grid.cu times the variants).
#pragma once

namespace tnn::trainer_tuning {

// The stream the optimizer's early part runs on (Trainer::set_optimizer_overlap): the device's highest
// priority (the default), so that its blocks are dispatched ahead of the waiting blocks of the
// backward's last reductions, or the default priority, so that they start only as those leave room.
// Read when a step is captured: set it before the trainer's first step.
void set_overlap_high_priority(bool on);
bool overlap_high_priority();

}  // namespace tnn::trainer_tuning
