/*
 * libgpoolosmevents.so: an OpenSM event plugin that forwards the fabric events gpool cares about
 * (traps, sweep and subnet-up milestones) as one text datagram each to a UNIX datagram socket,
 * where `gpool fabric watch` (src/ib/trap_watch.h) turns them into targeted port queries and
 * controller updates.
 *
 * Load it with `opensm --config F` where F says `event_plugin_name gpoolosmevents` (OpenSM
 * dlopens "lib<name>.so", so the directory must be on LD_LIBRARY_PATH), and name the socket in
 * the environment: GPOOL_OSM_EVENTS=/path/to/socket.
 *
 * Datagram format (one line, ASCII, fields separated by one space):
 *   gpool-osm v1 t=<unix ns> ev=trap num=<trap number> issuer_lid=<lid> [lid=<lid>] [port=<n>]
 *   gpool-osm v1 t=<unix ns> ev=<subnet_up|heavy_sweep_start|heavy_sweep_done|ucast_routing_done>
 * For trap 128 (link state change) lid= is the switch whose port changed; the trap names no
 * port, so the receiver queries that switch's ports. Traps 129-131 carry lid= and port=.
 *
 * Why C and this shape: it runs inside OpenSM's process on OpenSM's threads (report() may be
 * called from the trap receiver with OpenSM's locks held), so it must never block, allocate much
 * or throw: one non-blocking sendto() per event, dropped (and counted) when the receiver is not
 * there or its buffer is full. The periodic discovery sweep stays the backstop for lost events.
 * It reads nothing from OpenSM's structures except the notice it is handed (their layout depends
 * on OpenSM's build options).
 *
 * Thread safety: report() may run on several OpenSM threads at once; the only shared state is
 * the socket (sendto on a datagram socket is atomic per message) and an atomic drop counter.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <opensm/osm_event_plugin.h>
#include <opensm/osm_version.h>

typedef struct gpool_osm_events {
  int fd;
  struct sockaddr_un addr;
  socklen_t addr_len;
  atomic_ulong sent;
  atomic_ulong dropped;
} gpool_osm_events_t;

static void* gpool_create(struct osm_opensm* osm) {
  (void)osm;  /* its layout depends on OpenSM's build options: not read */
  const char* path = getenv("GPOOL_OSM_EVENTS");
  if (path == NULL || path[0] == '\0') {
    fprintf(stderr, "gpoolosmevents: GPOOL_OSM_EVENTS (socket path) is not set\n");
    return NULL;
  }
  if (strlen(path) >= sizeof(((struct sockaddr_un*)0)->sun_path)) {
    fprintf(stderr, "gpoolosmevents: GPOOL_OSM_EVENTS '%s' is too long\n", path);
    return NULL;
  }
  gpool_osm_events_t* p = calloc(1, sizeof *p);
  if (p == NULL) return NULL;
  p->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (p->fd < 0) {
    fprintf(stderr, "gpoolosmevents: socket: %s\n", strerror(errno));
    free(p);
    return NULL;
  }
  p->addr.sun_family = AF_UNIX;
  memcpy(p->addr.sun_path, path, strlen(path) + 1);
  p->addr_len = (socklen_t)sizeof p->addr;
  atomic_init(&p->sent, 0);
  atomic_init(&p->dropped, 0);
  fprintf(stderr, "gpoolosmevents: forwarding events to %s\n", path);
  return p;
}

static void gpool_delete(void* data) {
  gpool_osm_events_t* p = data;
  if (p == NULL) return;
  close(p->fd);
  free(p);
}

static void gpool_send(gpool_osm_events_t* p, const char* line, int len) {
  if (len <= 0) return;
  if (sendto(p->fd, line, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr*)&p->addr,
             p->addr_len) == len) {
    atomic_fetch_add(&p->sent, 1);
  } else {
    atomic_fetch_add(&p->dropped, 1);  /* no receiver, or its queue is full: never block OpenSM */
  }
}

static int gpool_header(char* buf, size_t n, const char* ev) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  unsigned long long ns = (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
  return snprintf(buf, n, "gpool-osm v1 t=%llu ev=%s", ns, ev);
}

static void gpool_report(void* data, osm_epi_event_id_t id, void* event) {
  gpool_osm_events_t* p = data;
  if (p == NULL) return;
  char line[256];
  int len = 0;
  switch (id) {
    case OSM_EVENT_ID_TRAP: {
      const ib_mad_notice_attr_t* ntc = event;
      if (ntc == NULL || !ib_notice_is_generic(ntc)) return;
      unsigned num = cl_ntoh16(ntc->g_or_v.generic.trap_num);
      len = gpool_header(line, sizeof line, "trap");
      len += snprintf(line + len, sizeof line - (size_t)len, " num=%u issuer_lid=%u", num,
                      (unsigned)cl_ntoh16(ntc->issuer_lid));
      if (num == 128) {
        len += snprintf(line + len, sizeof line - (size_t)len, " lid=%u",
                        (unsigned)cl_ntoh16(ntc->data_details.ntc_128.sw_lid));
      } else if (num >= 129 && num <= 131) {
        len += snprintf(line + len, sizeof line - (size_t)len, " lid=%u port=%u",
                        (unsigned)cl_ntoh16(ntc->data_details.ntc_129_131.lid),
                        (unsigned)ntc->data_details.ntc_129_131.port_num);
      }
      break;
    }
    case OSM_EVENT_ID_SUBNET_UP:
      len = gpool_header(line, sizeof line, "subnet_up");
      break;
    case OSM_EVENT_ID_HEAVY_SWEEP_START:
      len = gpool_header(line, sizeof line, "heavy_sweep_start");
      break;
    case OSM_EVENT_ID_HEAVY_SWEEP_DONE:
      len = gpool_header(line, sizeof line, "heavy_sweep_done");
      break;
    case OSM_EVENT_ID_UCAST_ROUTING_DONE:
      len = gpool_header(line, sizeof line, "ucast_routing_done");
      break;
    default:
      return;  /* counters, LFT blocks, SA dumps: not needed for health */
  }
  if (len >= (int)sizeof line) len = (int)sizeof line - 1;
  gpool_send(p, line, len);
}

/* OpenSM looks this symbol up by name (OSM_EVENT_PLUGIN_IMPL_NAME) and checks osm_version. */
osm_event_plugin_t osm_event_plugin = {
    .osm_version = OSM_VERSION,
    .create = gpool_create,
    .delete = gpool_delete,
    .report = gpool_report,
};
