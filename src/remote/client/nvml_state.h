// What nvml_api.cc (gpool's libnvidia-ml.so.1 stand-in) shares with its stubs and tests.
#pragma once

namespace gpool::remote::client::nvml {

// Parses a PCI bus id in NVML's forms: domain:bus:device.function (4- or 8-digit domain),
// domain:bus:device, bus:device.function (domain 0); hexadecimal, either case. False for anything
// else, and for a function other than 0 (GPUs are function 0).
bool ParseBusId(const char* id, unsigned* domain, unsigned* bus, unsigned* device);

// Device `dev`'s index on its server (GPOOL_DEVICES), 0 when out of range.
unsigned ServerIndex(int dev);

// Says "gpool: NAME is not implemented by gpool's libnvidia-ml.so.1 stand-in" once per name and
// returns NVML_ERROR_FUNCTION_NOT_FOUND (13).
int NvmlUnsupported(const char* name);

}  // namespace gpool::remote::client::nvml
