// The heatmap as a PNG, through stb_image_write (Debian's libstb-dev).
#include <moestat/error.hpp>
#include <moestat/report.hpp>

#include "colour.hpp"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb_image_write.h>

namespace moestat::report {

std::vector<std::uint8_t> render_heatmap_png(const Recording& recording, int cell_width,
                                             int cell_height) {
  recording.validate();
  MOESTAT_CHECK(cell_width > 0 && cell_height > 0 && cell_width <= 64 && cell_height <= 64,
                "heatmap cells must be 1-64 pixels, got {} x {}", cell_width, cell_height);
  const std::int64_t width = recording.num_experts() * cell_width;
  const std::int64_t height = recording.num_layers() * cell_height;
  MOESTAT_CHECK(width <= 1 << 15 && height <= 1 << 15,
                "heatmap of {} x {} pixels is too large for a PNG", width, height);
  const std::vector<std::int64_t> totals = recording.counts.totals();  // [L, E]
  const detail::LogColourScale scale(totals);
  std::vector<std::uint8_t> pixels(std::size_t(width * height * 3));
  for (std::int64_t y = 0; y < height; ++y) {
    const std::int64_t layer = y / cell_height;
    for (std::int64_t x = 0; x < width; ++x) {
      const std::int64_t expert = x / cell_width;
      const detail::Rgb colour =
          scale(totals[std::size_t(layer * recording.num_experts() + expert)]);
      std::copy(colour.begin(), colour.end(), pixels.begin() + (y * width + x) * 3);
    }
  }
  std::vector<std::uint8_t> png;
  const auto append = [](void* context, void* data, int size) {
    auto* out = static_cast<std::vector<std::uint8_t>*>(context);
    const auto* bytes = static_cast<const std::uint8_t*>(data);
    out->insert(out->end(), bytes, bytes + size);
  };
  const int ok = stbi_write_png_to_func(append, &png, int(width), int(height), 3, pixels.data(),
                                        int(width * 3));
  MOESTAT_CHECK(ok != 0, "could not encode the heatmap PNG");
  return png;
}

}  // namespace moestat::report
