// `moestat report --html` as a browser sees it: headless Chromium (Debian's `chromium`, run
// here; the test skips where it is absent) loads the page without console errors, its DOM
// holds one heatmap cell per layer and expert, and a screenshot is not blank.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <string>

#include "io/test_support.hpp"

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#include <stb_image.h>

namespace moestat {
namespace {

using test::ScratchDir;

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
  const auto page = demo / "page.html";
  ASSERT_EQ(run(fmt::format("'{0}' report '{1}/snapshot.json' --placement '{1}/placement.json' "
                            "--gpus 32 --html '{2}' 2>/dev/null",
                            MOESTAT_CLI_PATH, demo.string(), page.string())),
            0);

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
  EXPECT_NE(dom.find("id=\"gpu-load\""), std::string::npos);
  EXPECT_NE(dom.find("id=\"pass-balancedness\""), std::string::npos);

  const auto shot = dir_.path() / "shot.png";
  chromium(page, fmt::format("--screenshot='{}'", shot.string()), log);
  EXPECT_TRUE(console_lines(log).empty());
  int width = 0, height = 0, channels = 0;
  stbi_uc* pixels = stbi_load(shot.string().c_str(), &width, &height, &channels, 3);
  ASSERT_NE(pixels, nullptr) << "no screenshot at " << shot;
  EXPECT_EQ(width, 1280);
  // Not blank: the luminance varies and the heatmap brings many colours.
  double sum = 0, sum_sq = 0;
  std::set<std::uint32_t> colours;
  const auto num_pixels = std::size_t(width) * std::size_t(height);
  for (std::size_t i = 0; i < num_pixels; ++i) {
    const stbi_uc* p = pixels + i * 3;
    const double luma = 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
    sum += luma;
    sum_sq += luma * luma;
    colours.insert(std::uint32_t(p[0]) << 16 | std::uint32_t(p[1]) << 8 | p[2]);
  }
  stbi_image_free(pixels);
  const double mean = sum / double(num_pixels);
  EXPECT_GT(std::sqrt(sum_sq / double(num_pixels) - mean * mean), 20.0);
  EXPECT_GT(colours.size(), 200u);
}

}  // namespace
}  // namespace moestat
