// `moestat report --html` as a browser sees it: headless Chromium (Debian's `chromium`, run
// here; the test skips where it is absent) loads the page without console errors, its DOM
// holds one heatmap cell per layer and expert, every chart has its title, axis titles and
// legend and the heatmap its colour bar, and a screenshot is not blank.
#include <cairo.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <string>

#include "io/svg_elements.hpp"
#include "io/test_support.hpp"

namespace moestat {
namespace {

using test::charts_in;
using test::ScratchDir;
using test::text_of;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

/// Lines of Chromium's log that report something a page's console or loader said.
std::vector<std::string> console_lines(const std::string& log) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin < log.size()) {
    std::size_t end = log.find('\n', begin);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(begin, end - begin);
    if (line.find(":CONSOLE") != std::string::npos || line.find("Uncaught") != std::string::npos ||
        line.find("net::ERR_") != std::string::npos) {
      out.push_back(line);
    }
    begin = end + 1;
  }
  return out;
}

class ReportInChromium : public ::testing::Test {
 protected:
  void SetUp() override {
    if (run("command -v chromium >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs it)";
    }
  }

  /// Runs headless Chromium on `page` with `mode` (--dump-dom or --screenshot=...);
  /// returns its stdout, and its log in `log`.
  std::string chromium(const std::filesystem::path& page, const std::string& mode,
                       std::string& log) {
    const auto out = dir_.path() / "chromium.out";
    const auto err = dir_.path() / "chromium.err";
    const std::string command = fmt::format(
        "timeout 120 chromium --headless --disable-gpu --no-sandbox --disable-dev-shm-usage "
        "--no-first-run --user-data-dir='{}' --enable-logging=stderr --v=0 "
        "--window-size=1280,2400 {} "
        "'file://{}' >'{}' 2>'{}'",
        (dir_.path() / "profile").string(), mode, page.string(), out.string(), err.string());
    EXPECT_EQ(run(command), 0) << read_file(err);
    log = read_file(err);
    return read_file(out);
  }

  ScratchDir dir_;
};

TEST_F(ReportInChromium, LoadsCleanlyWithEveryCellAndDrawsSomething) {
  const auto demo = dir_.path() / "demo";
  ASSERT_EQ(run(fmt::format("'{}' demo --out '{}' --passes 4 >/dev/null", MOESTAT_CLI_PATH,
                            demo.string())),
            0);
  // The demo's own page: recorded, EPLB and moestat judged on held-out passes, 4 nodes.
  const auto page = demo / "report.html";

  // The console check can see errors: a page that logs one is caught.
  const auto control = dir_.path() / "control.html";
  std::ofstream(control) << "<!DOCTYPE html><script>console.error('moestat-control')</script>";
  std::string log;
  chromium(control, "--dump-dom", log);
  const std::vector<std::string> caught = console_lines(log);
  ASSERT_TRUE(std::any_of(
      caught.begin(), caught.end(),
      [](const std::string& line) { return line.find("moestat-control") != std::string::npos; }))
      << "Chromium's log no longer shows console errors:\n"
      << log;

  const std::string dom = chromium(page, "--dump-dom", log);
  EXPECT_TRUE(console_lines(log).empty()) << console_lines(log)[0];
  EXPECT_EQ(count(dom, "class=\"cell\""), 61u * 256u);
  EXPECT_NE(dom.find("<section id=\"summary\">"), std::string::npos);
  EXPECT_NE(dom.find("<b>Best placement: "), std::string::npos);

  // Every chart as the browser holds it: a title, both axis titles, a legend naming every
  // placement (bar and line charts) and, on the heatmap, a colour bar with round ticks.
  const std::vector<std::string> charts = charts_in(dom);
  std::set<std::string> ids;
  for (const std::string& chart : charts) {
    const std::string id =
        chart.substr(chart.find("id=\"") + 4,
                     chart.find('"', chart.find("id=\"") + 4) - chart.find("id=\"") - 4);
    SCOPED_TRACE(id);
    ids.insert(id);
    EXPECT_NE(text_of(chart, "chart-title"), "");
    EXPECT_NE(text_of(chart, "x-title"), "");
    EXPECT_NE(text_of(chart, "y-title"), "");
    EXPECT_NE(chart.find("class=\"legend\""), std::string::npos);
    if (id == "heatmap") {
      EXPECT_EQ(text_of(chart, "colour-bar-title"), "token assignments (log scale)");
      EXPECT_GE(count(chart.substr(chart.find("class=\"colour-bar\"")), "<text"), 4u);
      continue;
    }
    for (const char* name : {"identity", "recorded", "EPLB", "moestat"}) {
      EXPECT_NE(chart.find(fmt::format(">{}</text>", name)), std::string::npos) << name;
    }
  }
  EXPECT_EQ(ids, (std::set<std::string>{"heatmap", "gpu-load", "gpu-peak-load",
                                        "layer-balancedness", "pass-balancedness"}));

  const auto shot = dir_.path() / "shot.png";
  chromium(page, fmt::format("--screenshot='{}'", shot.string()), log);
  EXPECT_TRUE(console_lines(log).empty());
  cairo_surface_t* image = cairo_image_surface_create_from_png(shot.string().c_str());
  ASSERT_EQ(cairo_surface_status(image), CAIRO_STATUS_SUCCESS) << "no screenshot at " << shot;
  const int width = cairo_image_surface_get_width(image);
  const int height = cairo_image_surface_get_height(image);
  const int stride = cairo_image_surface_get_stride(image);
  const unsigned char* data = cairo_image_surface_get_data(image);
  EXPECT_EQ(width, 1280);
  // Not blank: the luminance varies and the heatmap brings many colours.
  double sum = 0, sum_sq = 0;
  std::set<std::uint32_t> colours;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const std::uint32_t pixel =
          reinterpret_cast<const std::uint32_t*>(data + y * stride)[x] & 0xffffffu;
      const double luma =
          0.299 * (pixel >> 16 & 0xff) + 0.587 * (pixel >> 8 & 0xff) + 0.114 * (pixel & 0xff);
      sum += luma;
      sum_sq += luma * luma;
      colours.insert(pixel);
    }
  }
  cairo_surface_destroy(image);
  const auto num_pixels = double(width) * double(height);
  const double mean = sum / num_pixels;
  EXPECT_GT(std::sqrt(sum_sq / num_pixels - mean * mean), 20.0);
  EXPECT_GT(colours.size(), 200u);
}

}  // namespace
}  // namespace moestat
