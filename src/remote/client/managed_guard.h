// Host access to a __managed__ variable, stopped with a message that names it.
//
// Managed memory is not remoted (docs/remoting/driver-api.md, "Managed variables"): the driver stand-in
// answers cuLibraryGetManaged with the variable's device address on the server, and NVIDIA's
// runtime stores that address in the host shadow through which the program's host code reads and
// writes the variable. The stand-in never sees such an access; the access faults. This guard makes
// the fault say what happened: Register (from cuLibraryGetManaged) records the variable's device
// range and a message prepared then, reserves the range in this process (PROT_NONE) so that it
// cannot also be host memory of the program, and installs, once, a SIGSEGV/SIGBUS handler that
// writes the message when the faulting address lies in a registered range and then dies of the
// signal with its default action. Faults elsewhere go to the handler that was there before (or
// get the default action), as if the guard were not installed.
//
// Limits: the handler runs on an alternate signal stack only in the thread that registered the
// first variable (unless that thread had one already, e.g. the sanitizers'); another thread's
// stack overflow is delivered as without the guard. A handler the program installs later, without
// chaining to the previous one, replaces the guard. When the range is already mapped in this
// process (a device address that is also one of the program's host addresses, possible for a real
// GPU's addresses) it cannot be reserved: a host access then reads or writes this process's own
// memory, unnoticed, and Register says so.
#pragma once

#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gpool::remote::client::managed {

// A registered variable; immutable once published, never freed (the handler may read it at any
// time), only marked dead when its library is unloaded.
struct Variable;

// Whether the variable's device range is now reserved in this process, so that host access faults.
enum class Reserve {
  kReserved,     // reserved by this call (or by an earlier one, for a range shared with another)
  kMappedHere,   // (part of) the range is already mapped in this process: host access reads it
  kUnavailable,  // the kernel refused the reservation for another reason (e.g. beyond user space)
};

struct Registration {
  Reserve reserve = Reserve::kReserved;
  std::string detail;  // for kMappedHere/kUnavailable: what the kernel said, to warn with
};

// Records __managed__ variable `name` of `size` bytes at device address `ptr` of device `device`
// (the program's device index), reserves its pages, and installs the fault handler on the first
// call. Thread-safe; not async-signal-safe.
Registration Register(std::string_view name, uint64_t ptr, uint64_t size, int device);

// Marks the variables registered at `ptr` of `device` dead (their library is unloaded: the address may then
// be another allocation's). The pages stay reserved.
void Unregister(uint64_t ptr, int device);

// The live registered variable whose range holds `addr`, or null. Async-signal-safe: no locks,
// no allocation.
const Variable* Find(uint64_t addr);

// The variable's FATAL line, as the handler writes it ("gpool: FATAL: host access to ...\n").
std::string_view Message(const Variable* v);

// Whether Register has installed the SIGSEGV/SIGBUS handler (and so whether `handler` is it).
bool HandlerInstalled();
// The handler's address, to compare with what sigaction reports.
void (*Handler())(int, siginfo_t*, void*);

}  // namespace gpool::remote::client::managed
