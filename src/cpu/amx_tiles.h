// The one AMX tile configuration loom's AMX kernels share: 8 tiles of 16 rows × 64 bytes, loaded once per thread.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace loom::cpu {

inline constexpr int kAmxTileRows = 16;

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every AMX kernel (bf16 and int8) uses this shape, so whichever runs next on a thread finds the
// tiles configured. Call only where the CPU has AMX and the tile state was granted.
__attribute__((target("amx-tile"))) inline void ConfigureAmxTiles() {
  static thread_local bool configured = false;
  if (configured) return;
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = kAmxTileRows;
  }
  _tile_loadconfig(&cfg);
  configured = true;
}

}  // namespace loom::cpu
