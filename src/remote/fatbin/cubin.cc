// Kernel parameter layouts from a cubin's ".nv.info.<kernel>" sections.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "remote/fatbin/fatbin.h"
#include "remote/fatbin/reader.h"

namespace gpool::remote::fatbin {
namespace {

constexpr uint8_t kFmtNval = 1, kFmtBval = 2, kFmtHval = 3, kFmtSval = 4;
constexpr uint8_t kAttrKparamInfo = 0x17;
constexpr uint8_t kAttrCbankParamSize = 0x19;
constexpr std::string_view kInfoPrefix = ".nv.info.";

struct Section {
  uint32_t name = 0;
  uint64_t offset = 0, size = 0;
  uint32_t type = 0;
  uint32_t link = 0;  // a symbol table's string table
};
constexpr uint32_t kShtSymtab = 2, kShtNobits = 8;
constexpr uint8_t kSttObject = 1;
constexpr size_t kSymSize = 24;  // Elf64_Sym

StatusOr<std::string_view> CString(const Reader& r, Bytes data, size_t offset, std::string_view what) {
  if (offset >= data.size()) {
    return Status::InvalidArgument(fmt::format("cubin: {} name offset {} outside strtab", what, offset));
  }
  const char* begin = reinterpret_cast<const char*>(data.data()) + offset;
  const void* nul = std::memchr(begin, 0, data.size() - offset);
  if (nul == nullptr) {
    return Status::InvalidArgument(fmt::format("cubin: {} name at {} not terminated", what, offset));
  }
  (void)r;
  return std::string_view(begin, static_cast<const char*>(nul) - begin);
}

StatusOr<KernelInfo> ParseInfo(std::string_view kernel, Bytes info, size_t section_offset) {
  Reader r(info, "cubin .nv.info");
  KernelInfo k;
  k.name = std::string(kernel);
  struct Raw {
    uint16_t ordinal, offset;
    uint32_t size;
  };
  std::vector<Raw> raw;
  uint32_t cbank_size = 0;
  bool have_cbank_size = false;
  size_t p = 0;
  while (p + 4 <= info.size()) {
    uint8_t fmt_byte = 0, attr = 0;
    uint16_t value = 0;
    GPOOL_RETURN_IF_ERROR(r.U8(p, &fmt_byte));
    GPOOL_RETURN_IF_ERROR(r.U8(p + 1, &attr));
    GPOOL_RETURN_IF_ERROR(r.U16(p + 2, &value));
    size_t at = section_offset + p;
    p += 4;
    if (fmt_byte == kFmtSval) {
      GPOOL_ASSIGN_OR_RETURN(Bytes payload, r.Sub(p, value));
      if (attr == kAttrKparamInfo) {
        if (payload.size() < 12) {
          return Status::InvalidArgument(fmt::format(
              "cubin: {}: KPARAM_INFO at offset {} has {} bytes, want 12", kernel, at, value));
        }
        Reader pr(payload, "KPARAM_INFO");
        Raw rp{};
        uint32_t bits = 0;
        GPOOL_RETURN_IF_ERROR(pr.U16(4, &rp.ordinal));
        GPOOL_RETURN_IF_ERROR(pr.U16(6, &rp.offset));
        GPOOL_RETURN_IF_ERROR(pr.U32(8, &bits));
        rp.size = (bits >> 18) & 0x3fff;
        raw.push_back(rp);
      }
      p += (static_cast<size_t>(value) + 3) & ~size_t{3};
    } else if (fmt_byte == kFmtNval || fmt_byte == kFmtBval || fmt_byte == kFmtHval) {
      if (attr == kAttrCbankParamSize) {
        cbank_size = value;
        have_cbank_size = true;
      }
    } else {
      return Status::InvalidArgument(fmt::format("cubin: {}: unknown EIATTR format {} at offset {}",
                                                 kernel, fmt_byte, at));
    }
  }
  std::sort(raw.begin(), raw.end(), [](const Raw& a, const Raw& b) { return a.ordinal < b.ordinal; });
  uint32_t end = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i].ordinal != i) {
      return Status::InvalidArgument(fmt::format(
          "cubin: {}: parameter ordinals not 0..{} (found {} at position {})", kernel,
          raw.size() - 1, raw[i].ordinal, i));
    }
    k.params.push_back(KernelParam{raw[i].offset, raw[i].size});
    end = std::max<uint32_t>(end, uint32_t{raw[i].offset} + raw[i].size);
  }
  if (have_cbank_size && cbank_size < end) {
    return Status::InvalidArgument(fmt::format(
        "cubin: {}: parameters end at {} beyond CBANK_PARAM_SIZE {}", kernel, end, cbank_size));
  }
  k.param_bytes = have_cbank_size ? cbank_size : end;
  return k;
}

// The section headers of an ELF64 little-endian cubin, checked to lie inside it.
StatusOr<std::vector<Section>> Sections(const Reader& r, Bytes elf) {
  GPOOL_RETURN_IF_ERROR(r.Need(0, 64));
  if (std::memcmp(elf.data(), "\x7f" "ELF", 4) != 0) {
    return Status::InvalidArgument("cubin: not an ELF file (bad magic)");
  }
  uint8_t cls = 0, data = 0;
  GPOOL_RETURN_IF_ERROR(r.U8(4, &cls));
  GPOOL_RETURN_IF_ERROR(r.U8(5, &data));
  if (cls != 2 || data != 1) {
    return Status::InvalidArgument(
        fmt::format("cubin: want ELF64 little-endian, got class {} data {}", cls, data));
  }
  uint64_t shoff = 0;
  uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  GPOOL_RETURN_IF_ERROR(r.U64(0x28, &shoff));
  GPOOL_RETURN_IF_ERROR(r.U16(0x3a, &shentsize));
  GPOOL_RETURN_IF_ERROR(r.U16(0x3c, &shnum));
  GPOOL_RETURN_IF_ERROR(r.U16(0x3e, &shstrndx));
  if (shentsize < 64) {
    return Status::InvalidArgument(fmt::format("cubin: section header size {} < 64", shentsize));
  }
  if (shstrndx >= shnum) {
    return Status::InvalidArgument(
        fmt::format("cubin: section name table index {} >= {} sections", shstrndx, shnum));
  }
  std::vector<Section> sections(shnum);
  for (uint16_t i = 0; i < shnum; ++i) {
    if (shoff > elf.size()) return Status::InvalidArgument("cubin: section headers past the end");
    size_t h = static_cast<size_t>(shoff) + size_t{i} * shentsize;
    GPOOL_RETURN_IF_ERROR(r.U32(h, &sections[i].name));
    GPOOL_RETURN_IF_ERROR(r.U32(h + 4, &sections[i].type));
    GPOOL_RETURN_IF_ERROR(r.U64(h + 24, &sections[i].offset));
    GPOOL_RETURN_IF_ERROR(r.U64(h + 32, &sections[i].size));
    GPOOL_RETURN_IF_ERROR(r.U32(h + 40, &sections[i].link));
  }
  return sections;
}

}  // namespace

StatusOr<std::vector<KernelInfo>> ParseCubin(Bytes elf) {
  Reader r(elf, "cubin");
  GPOOL_ASSIGN_OR_RETURN(std::vector<Section> sections, Sections(r, elf));
  uint16_t shstrndx = 0;
  GPOOL_RETURN_IF_ERROR(r.U16(0x3e, &shstrndx));
  const Section& strtab = sections[shstrndx];
  GPOOL_ASSIGN_OR_RETURN(Bytes names, r.Sub(strtab.offset, strtab.size));
  std::vector<KernelInfo> kernels;
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].type == kShtNobits) continue;
    GPOOL_ASSIGN_OR_RETURN(std::string_view name,
                           CString(r, names, sections[i].name, fmt::format("section {}", i)));
    if (!name.starts_with(kInfoPrefix) || name.size() == kInfoPrefix.size()) continue;
    GPOOL_ASSIGN_OR_RETURN(Bytes info, r.Sub(sections[i].offset, sections[i].size));
    GPOOL_ASSIGN_OR_RETURN(KernelInfo k, ParseInfo(name.substr(kInfoPrefix.size()), info,
                                                   static_cast<size_t>(sections[i].offset)));
    kernels.push_back(std::move(k));
  }
  return kernels;
}

StatusOr<std::map<std::string, uint64_t, std::less<>>> ParseCubinGlobals(Bytes elf) {
  Reader r(elf, "cubin");
  GPOOL_ASSIGN_OR_RETURN(std::vector<Section> sections, Sections(r, elf));
  std::map<std::string, uint64_t, std::less<>> globals;
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].type != kShtSymtab) continue;
    if (sections[i].link >= sections.size()) {
      return Status::InvalidArgument(fmt::format(
          "cubin: symbol table {} links to string table {} of {} sections", i, sections[i].link,
          sections.size()));
    }
    const Section& strtab = sections[sections[i].link];
    GPOOL_ASSIGN_OR_RETURN(Bytes names, r.Sub(strtab.offset, strtab.size));
    GPOOL_ASSIGN_OR_RETURN(Bytes syms, r.Sub(sections[i].offset, sections[i].size));
    Reader sr(syms, "cubin symtab");
    for (size_t at = 0; at + kSymSize <= syms.size(); at += kSymSize) {
      uint32_t name = 0;
      uint8_t info = 0;
      uint16_t shndx = 0;
      uint64_t size = 0;
      GPOOL_RETURN_IF_ERROR(sr.U32(at, &name));
      GPOOL_RETURN_IF_ERROR(sr.U8(at + 4, &info));
      GPOOL_RETURN_IF_ERROR(sr.U16(at + 6, &shndx));
      GPOOL_RETURN_IF_ERROR(sr.U64(at + 16, &size));
      if ((info & 0xf) != kSttObject || shndx == 0) continue;  // not a defined variable
      GPOOL_ASSIGN_OR_RETURN(std::string_view n,
                             CString(r, names, name, fmt::format("symbol at {}", at)));
      globals.emplace(std::string(n), size);
    }
  }
  return globals;
}

}  // namespace gpool::remote::fatbin
