// What this tool runs natively, beside codegen (native.py builds and loads this file):
//  * LLD's ELF driver as a C function, so a build worker links in-process (lldlink.py):
//    the same LLD that ld.lld-22 is, without its ~25 ms of process start-up per object;
//  * a loop over LLVM's C disassembler (disasm.py): one call per function instead of one
//    ctypes call per instruction, same text.
// Built on first use against the system's liblld (static) and libLLVM (shared).
#include "lld/Common/Driver.h"
#include "llvm-c/Disassembler.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

LLD_HAS_DRIVER(elf)

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

// Disassembles code[start, end) with a context from LLVMCreateDisasmCPUFeatures: one line
// "<pc>\t<size>\t<text>" per instruction (text trimmed; "4\t<unknown>" where decoding
// fails, as disasm._decode does). Returns the lines, malloc'ed.
extern "C" char *wgradcache_disassemble(void *dc, const uint8_t *code, uint64_t start,
                                        uint64_t end) {
  std::string out;
  out.reserve((end - start) * 8);
  char buf[1024];
  for (uint64_t pc = start; pc < end;) {
    size_t n = LLVMDisasmInstruction(dc, const_cast<uint8_t *>(code) + pc, end - pc, pc, buf,
                                     sizeof buf);
    out += std::to_string(pc);
    if (n == 0) {
      out += "\t4\t<unknown>\n";
      pc += 4;
      continue;
    }
    const char *b = buf, *e = buf + strlen(buf);
    while (b < e && isspace(static_cast<unsigned char>(*b))) ++b;
    while (e > b && isspace(static_cast<unsigned char>(e[-1]))) --e;
    out += '\t';
    out += std::to_string(n);
    out += '\t';
    out.append(b, e);
    out += '\n';
    pc += n;
  }
  return strdup(out.c_str());
}

extern "C" void wgradcache_free(char *p) { free(p); }
