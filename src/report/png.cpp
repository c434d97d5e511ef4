// SVG to PNG through librsvg and Cairo (Debian's librsvg2-dev, libcairo2-dev): the PNG
// shows exactly the figure the page and `--svg` show, axes, titles and colour bar included.
#include <cairo.h>
#include <librsvg/rsvg.h>

#include <cmath>
#include <memory>
#include <moestat/error.hpp>
#include <moestat/report.hpp>

#include "figures.hpp"

namespace moestat::report {
namespace {

template <auto Free>
struct Deleter {
  template <typename T>
  void operator()(T* pointer) const noexcept {
    Free(pointer);
  }
};
using Surface = std::unique_ptr<cairo_surface_t, Deleter<cairo_surface_destroy>>;
using Context = std::unique_ptr<cairo_t, Deleter<cairo_destroy>>;
using Handle = std::unique_ptr<RsvgHandle, Deleter<g_object_unref>>;

cairo_status_t append(void* closure, const unsigned char* data, unsigned int length) {
  auto* out = static_cast<std::vector<std::uint8_t>*>(closure);
  out->insert(out->end(), data, data + length);
  return CAIRO_STATUS_SUCCESS;
}

}  // namespace

std::vector<std::uint8_t> svg_to_png(std::string_view svg, double scale) {
  MOESTAT_CHECK(scale >= 0.25 && scale <= 8.0, "the PNG scale must be 0.25 to 8, got {}", scale);
  GError* error = nullptr;
  Handle handle(rsvg_handle_new_from_data(reinterpret_cast<const guint8*>(svg.data()),
                                          gsize(svg.size()), &error));
  if (!handle) {
    const std::string why = error != nullptr ? error->message : "unknown error";
    g_clear_error(&error);
    MOESTAT_FAIL("the SVG does not parse: {}", why);
  }
  gdouble width = 0, height = 0;
  MOESTAT_CHECK(rsvg_handle_get_intrinsic_size_in_pixels(handle.get(), &width, &height),
                "the SVG has no size in pixels (its width and height must be absolute)");
  const auto pixels_wide = int(std::ceil(width * scale));
  const auto pixels_high = int(std::ceil(height * scale));
  MOESTAT_CHECK(
      pixels_wide > 0 && pixels_high > 0 && pixels_wide <= 1 << 15 && pixels_high <= 1 << 15,
      "an image of {} x {} pixels is too large for a PNG", pixels_wide, pixels_high);
  Surface surface(cairo_image_surface_create(CAIRO_FORMAT_RGB24, pixels_wide, pixels_high));
  Context cairo(cairo_create(surface.get()));
  cairo_set_source_rgb(cairo.get(), 1, 1, 1);
  cairo_paint(cairo.get());
  const RsvgRectangle viewport{0, 0, double(pixels_wide), double(pixels_high)};
  const bool drawn = rsvg_handle_render_document(handle.get(), cairo.get(), &viewport, &error);
  if (!drawn) {
    const std::string why = error != nullptr ? error->message : "unknown error";
    g_clear_error(&error);
    MOESTAT_FAIL("the SVG could not be drawn: {}", why);
  }
  std::vector<std::uint8_t> png;
  MOESTAT_CHECK(
      cairo_surface_write_to_png_stream(surface.get(), append, &png) == CAIRO_STATUS_SUCCESS,
      "could not encode the PNG");
  return png;
}

std::vector<std::uint8_t> render_heatmap_png(const Recording& recording, double scale) {
  recording.validate();
  return svg_to_png(detail::heatmap_figure(recording).svg, scale);
}

}  // namespace moestat::report
