// What SGLang's count formats keep of a CountWindow: the counts and their shape, not what
// the snapshot knew of each pass, for comparing a window written and read back.
#pragma once

#include <moestat/counts.hpp>

namespace moestat::test {

inline CountWindow counts_only(CountWindow window) {
  window.pass_rows = {};
  return window;
}

}  // namespace moestat::test
