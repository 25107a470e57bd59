/* room_page: the buyer's waiting-room page (GET /skus/{sku}/room), HTML and
 * JavaScript in the binary; its one caller is room_routes.c. */
#ifndef SECKILL_ROOM_PAGE_H
#define SECKILL_ROOM_PAGE_H

extern const char svc_room_page[];

#endif
