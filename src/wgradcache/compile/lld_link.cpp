// LLD's ELF driver as a C function, so a build worker links in-process (lldlink.py).
// Built on first use against the system's liblld (static) and libLLVM (shared): the same
// LLD that ld.lld-22 is, without its ~25 ms of process start-up per code object.
#include "lld/Common/Driver.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

LLD_HAS_DRIVER(elf)

namespace lld {
std::string getLLDVersion();
}

static char *copy(const std::string &s) { return s.empty() ? nullptr : strdup(s.c_str()); }

// Runs `ld.lld argv...`; what LLD prints goes to *out and *err (malloc'ed, or null).
// Returns LLD's exit code; bit 8 is set when LLD says this process cannot link again.
extern "C" int wgradcache_lld_main(int argc, const char **argv, char **out, char **err) {
  std::string o, e;
  llvm::raw_string_ostream os(o), es(e);
  std::vector<const char *> args(argv, argv + argc);
  lld::Result r = lld::lldMain(args, os, es, {{lld::Gnu, &lld::elf::link}});
  os.flush();
  es.flush();
  *out = copy(o);
  *err = copy(e);
  return (r.retCode & 0xff) | (r.canRunAgain ? 0 : 0x100);
}

extern "C" void wgradcache_lld_free(char *p) { free(p); }
