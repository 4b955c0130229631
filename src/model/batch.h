// Batch: the unit of work of one engine step — a flat list of token rows from many sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/attention.h"

namespace loom {

// Rows [first_row, first_row + num_rows) use adapter `adapter_slot` (-1 = base model).
struct Segment {
  int first_row = 0;
  int num_rows = 0;
  int adapter_slot = -1;
};

// Rows of several sequences at different positions (prefill chunks and decode rows together).
// Each sequence's rows are contiguous (one AttentionChunk); rows sharing an adapter are
// contiguous so `segments` can describe them.
struct Batch {
  std::vector<int32_t> tokens;             // [num_rows]
  std::vector<int32_t> positions;          // [num_rows]
  std::vector<AttentionChunk> chunks;      // one per sequence in the step
  // Per chunk: the tokens its sequence has this step (≥ start_pos + num_rows; the whole prompt
  // during a chunked prefill), i.e. the length of the full forward the step stands for.
  // Longrope picks its factor set by it.
  std::vector<int32_t> context_lens;
  std::vector<Segment> segments;           // empty = every row runs the base model
  std::vector<int32_t> logit_rows;         // rows whose logits Forward returns, in this order

  int num_rows() const { return static_cast<int>(tokens.size()); }
  void Clear() {
    tokens.clear();
    positions.clear();
    chunks.clear();
    context_lens.clear();
    segments.clear();
    logit_rows.clear();
  }
  // Appends one sequence's rows: tokens at positions start_pos.. with its block table;
  // `context_len`: the sequence's length this step (0 = start_pos + count).
  void AddChunk(const int32_t* chunk_tokens, int count, int start_pos, const int32_t* block_table,
                int num_blocks, int context_len = 0) {
    AttentionChunk c;
    c.first_row = num_rows();
    c.num_rows = count;
    c.start_pos = start_pos;
    c.block_table = block_table;
    c.num_blocks = num_blocks;
    chunks.push_back(c);
    context_lens.push_back(context_len > start_pos + count ? context_len : start_pos + count);
    for (int i = 0; i < count; ++i) {
      tokens.push_back(chunk_tokens[i]);
      positions.push_back(start_pos + i);
    }
  }
};

}  // namespace loom
