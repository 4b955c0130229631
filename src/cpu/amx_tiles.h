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

// The rows of tiles 0 and 4 in this thread's loaded configuration (0: none loaded yet).
inline int& AmxLoadedRows() {
  static thread_local int rows = 0;
  return rows;
}

// Tiles 0 (an accumulator) and 4 (a weight operand) with `rows` rows, the others with 16: a
// product over fewer than 16 weight rows (MatmulBf16AmxRow's tail or rank cut) loads just those
// rows. Each row of a tile product is computed from its own rows alone, so the bits of a row do
// not depend on the tile's row count (decode_kernels_test checks this against the 16-row kernel).
__attribute__((target("amx-tile"))) inline void ConfigureAmxTileRows(int rows) {
  if (AmxLoadedRows() == rows) return;
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = kAmxTileRows;
  }
  cfg.rows[0] = cfg.rows[4] = static_cast<uint8_t>(rows);
  _tile_loadconfig(&cfg);
  AmxLoadedRows() = rows;
}

// Every AMX kernel (bf16 and int8) uses this shape, so whichever runs next on a thread finds the
// tiles configured. Call only where the CPU has AMX and the tile state was granted.
__attribute__((target("amx-tile"))) inline void ConfigureAmxTiles() {
  ConfigureAmxTileRows(kAmxTileRows);
}

}  // namespace loom::cpu
