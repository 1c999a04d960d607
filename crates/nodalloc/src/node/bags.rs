//! The central bag lists of a node heap: batches carved from bags and taken back into them,
//! the ring in front of them, the remote-free inbox, and the doubly linked partial-bag list
//! (every touch of a bag descriptor happens under its class lock).

use super::spares::keep_spare;
use super::*;

/// The word written into the second word of each object not yet handed out (0: none): into
/// every object of a dense bag (objects up to [`DENSE_OBJECT_MAX`]) when the bag is created
/// ([`mark_objects`]), into each object of a sparse bag when a carve takes it. The C face sets
/// its double-free mark here in default mode (`raw::mark_carved_objects`), so an object the
/// program never got carries the mark its free would have written: a `free` of it (an address
/// such as `p + 4096`) meets the mark and is screened, and the screen finds it in the thread's
/// cache (carved) or refuses it as an object start its bag never carved. The pops of that face
/// clear the mark of every object they hand out, and its zeroing paths clear at least two
/// words. One store an object, on a line the carve writes anyway or a page its bag's use
/// touches.
pub(crate) static CARVE_MARK: AtomicUsize = AtomicUsize::new(0);

impl NodeHeaps {
    /// The mark ([`CARVE_MARK`]) objects of `class` carry until they are handed out: 0 when the
    /// C face asked for none, in secure mode (which carves without it), and for a class too
    /// small to hold the screen word.
    pub(super) fn screen_mark(&self, class: SizeClass) -> usize {
        if self.arena.is_secure()
            || class.size() < crate::ds::SCREEN_WORD + core::mem::size_of::<usize>()
        {
            0
        } else {
            CARVE_MARK.load(Ordering::Relaxed)
        }
    }

    /// Up to `want` objects from bags, own node first, then other nodes nearest first.
    pub fn take_from_bags(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
        want: usize,
    ) -> Option<Batch> {
        if let Some(batch) = self.take_from_node_bags(node, part, class, want, &mut false, None) {
            return Some(batch);
        }
        self.steal(node, part, class, want)
    }

    /// For a refill that found nothing of (`part`, `class`) on `node`: a batch of another node's
    /// ring or bags (up to `want` objects from the bags), nearest node first, counted as a
    /// steal of `node`'s. `None` when no node has one.
    pub fn steal(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
        want: usize,
    ) -> Option<Batch> {
        let mut order = [0u8; MAX_NODES];
        let count = self.arena.topology.nearest_nodes(node.index(), &mut order);
        for &other in &order[..count] {
            if !self.arena.may_spill(node.index(), other as usize) {
                continue;
            }
            let other = NodeId(other as usize);
            let stolen = self
                .ring_shards_of(other, part, class)
                .find_map(|(_, ring)| ring.pop(&self.node(other).ops))
                .or_else(|| self.take_from_node_bags(other, part, class, want, &mut false, None));
            if stolen.is_some() {
                self.node(node).steals.fetch_add(1, Ordering::Relaxed);
                return stolen;
            }
        }
        None
    }

    /// For a thread's allocation that found its list of `class` (of the sparse pool: objects
    /// above [`DENSE_OBJECT_MAX`]) empty: up to `want` free objects of `node`'s bags
    /// (objects the program touched before) as `Ok`, or, when those are empty and a bag would
    /// carve objects for the first time, the rest of that bag **untouched** as a [`Run`]
    /// (`Err`), for the thread to hand out one at a time without coming back here. Carving
    /// writes each object's link into the object's first page, which faults it in: a refill
    /// that carved a whole batch of them made one `malloc` pay a page fault per object (4–6 µs
    /// for a batch) for pages the program had not touched yet; untouched, an object's first
    /// page faults when the program touches it, as it would under any allocator. (Handed out
    /// one object a refill, a program that allocates a thousand such objects in a row paid a
    /// class lock and a bag lookup for each: 230 ns a pair at 16 KiB against tcmalloc's 43;
    /// docs/JOURNAL.md, issue 32's eleventh round.) With the run, whether its bag's memory
    /// reads as zero: a bag over memory that an earlier bag or span used holds that use's
    /// bytes, and a face that marks the blocks it frees must clear such an object's mark (a
    /// leftover mark makes its first free look like a double free, confirmed the slow way).
    /// The objects of the run count as out of the bags, as cached objects do; the thread gives
    /// back what it did not hand out with [`Self::return_run`]. `None` when the node has
    /// nothing left.
    pub fn take_untouched(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
        want: usize,
    ) -> Option<Result<Batch, Run>> {
        debug_assert!(class.size() > DENSE_OBJECT_MAX);
        let mut run = Run::EMPTY;
        match self.take_from_node_bags(node, part, class, want, &mut false, Some(&mut run)) {
            Some(batch) => Some(Ok(batch)),
            None if run.left != 0 => Some(Err(run)),
            None => None,
        }
    }

    /// Objects from `node`'s own bags, carving a new bag from its own region if needed.
    /// `head_zeroed` is set when the batch's head was carved from a bag whose memory read as
    /// zero (so the object is zero but for its link word). With `fresh` (see
    /// [`Self::take_untouched`]; not in secure mode), the batch stops before an object would be
    /// carved; if it is empty then, the rest of the bag is carved without writing a link, put
    /// in `fresh`, and the batch is `None`.
    pub(super) fn take_from_node_bags(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
        mut want: usize,
        head_zeroed: &mut bool,
        mut fresh: Option<&mut Run>,
    ) -> Option<Batch> {
        self.activate(node, part, class);
        let class_heap = self.class_in(node, part, class);
        let info = self.partition_info(part);
        let arena = self.arena;
        let map = arena.map();
        let size = class.size();
        let capacity = class.capacity() as u16;
        let secure = arena.is_secure();
        debug_assert!(fresh.is_none() || !secure);
        let mut untouched = 0;
        let mut from_bits = 0;
        let carve_mark = self.screen_mark(class);
        let _guard = class_heap.lock_counted(&self.node(node).ops);
        // SAFETY: the class lock is held for the rest of this function.
        let partial = unsafe { &mut *class_heap.partial.get() };
        let mut batch = Batch {
            head: null_mut(),
            tail: null_mut(),
            count: 0,
        };
        while batch.count < want {
            let created = partial.is_null();
            if created && fresh.is_some() && batch.count != 0 {
                // A batch of freed objects ends before a new bag: a bag started and left with
                // nothing carved would look prepared (`live == 0`) to the next refill.
                break;
            }
            if created && part == Partition::DEFAULT {
                // SAFETY: the class lock is held.
                *partial = unsafe { self.take_spare(node, class, class_heap, false) };
            }
            if created
                && partial.is_null()
                && !part.is_owned()
                && self.node(node).spare_bytes.load(Ordering::Relaxed) != 0
            {
                self.reclaim_spares(node, class, class.bag_bytes());
            }
            if created && partial.is_null() {
                let span = if part.is_owned() {
                    self.owned_bag_span(part, class)
                } else {
                    let span_of_region = || {
                        arena.alloc_span_on(node.index(), class.bag_units(), 1, SpanUse::Bag(class))
                    };
                    // The reclaim above gave back a bag's bytes of spares, whose spans may lie
                    // apart: refused, every other class's spare goes back (those whose lock is
                    // free) and the region is asked once more.
                    span_of_region().or_else(|| {
                        (self.reclaim_spares(node, class, usize::MAX) != 0)
                            .then(span_of_region)
                            .flatten()
                    })
                };
                let Some(address) = span else {
                    break;
                };
                class_heap.bags.fetch_add(1, Ordering::Relaxed);
                *partial = map.meta(map.unit_of(address));
                // SAFETY: the class lock is held and the bag is new, on no list but ours.
                unsafe { (**partial).role.bag.partition = part.0 };
                if carve_mark != 0 && size <= DENSE_OBJECT_MAX {
                    // SAFETY: the bag is new and ours under the class lock: no object of it is
                    // out, and every one of its objects holds the screen word (`screen_mark`
                    // is 0 otherwise).
                    unsafe {
                        mark_objects(
                            address,
                            size,
                            0,
                            marked_ahead(size, 0, capacity),
                            carve_mark,
                        )
                    };
                }
                if secure {
                    // SAFETY: the class lock is held and the bag is new, on no list but ours:
                    // its memory is ours to clear. Secure mode zeroes a bag whose memory held
                    // something before, so that an object never carved reads as zero (the C
                    // face's underflow check tells such an object from a damaged one).
                    unsafe {
                        (**partial).role.bag.seed = arena.bag_seed();
                        if !(**partial).role.bag.zeroed {
                            crate::os::fill_unchecked(address as *mut u8, 0, class.bag_bytes());
                            (**partial).role.bag.zeroed = true;
                        }
                    }
                }
            }
            let bag = *partial;
            // SAFETY: the class lock is held and `bag` heads this class's partial list. A bag
            // with no object out there is one the maintenance thread prepared (`prepare.rs`).
            if unsafe { (*bag).role.bag.live } == 0 {
                class_heap.started_bags.fetch_add(1, Ordering::Relaxed);
                if !created {
                    self.forget_waiting(node, class);
                }
            }
            let start = map.address_of(map.unit_of_meta(bag));
            // SAFETY: the class lock is held and `bag` is one of this class's bags.
            unsafe {
                if let Some(info) = info {
                    if (*bag).role.bag.listed != 0 && (*bag).role.bag.live != 0 {
                        info.picked.fetch_add(1, Ordering::Relaxed);
                    }
                }
                while batch.count < want {
                    if (*bag).role.bag.listed != 0 {
                        // Its free objects first, by their bits: no object is read.
                        match self.take_free(bag, start, class, &mut batch, want, head_zeroed) {
                            Ok(taken) => from_bits += taken,
                            Err((object, stored)) => {
                                drop(_guard);
                                report_damaged_link(arena, object, stored);
                            }
                        }
                        continue;
                    }
                    let zeroed;
                    let object = if (*bag).role.bag.carved < capacity {
                        if let Some(fresh) = fresh.take() {
                            // Never-touched memory: a batch of free objects ends here; an
                            // empty one becomes the rest of the bag, untouched.
                            want = 0;
                            if batch.count == 0 {
                                let carved = (*bag).role.bag.carved;
                                let left = capacity - carved;
                                *fresh = Run {
                                    next: (start + carved as usize * size) as *mut u8,
                                    left: u32::from(left),
                                    zeroed: (*bag).role.bag.zeroed,
                                };
                                (*bag).role.bag.carved = capacity;
                                (*bag).role.bag.live += left;
                                untouched = usize::from(left);
                            }
                            break;
                        }
                        zeroed = !secure && (*bag).role.bag.zeroed;
                        let index = if secure {
                            let carved = u32::from((*bag).role.bag.carved);
                            carve_order(carved, u32::from(capacity), (*bag).role.bag.seed) as u16
                        } else {
                            (*bag).role.bag.carved
                        };
                        let object = (start + index as usize * size) as *mut u8;
                        (*bag).role.bag.carved += 1;
                        if carve_mark != 0 {
                            if size > DENSE_OBJECT_MAX {
                                // The object's screen word: the object holds it
                                // (`screen_mark`), and it is ours until it is handed out.
                                (object.add(crate::ds::SCREEN_WORD) as *mut usize)
                                    .write(carve_mark);
                            } else {
                                // A dense bag's marks run a page ahead of its carve: the
                                // object that enters that reach gets its mark now (the carved
                                // one got its own when the bag was created or an earlier carve
                                // ran ahead).
                                let carved = usize::from((*bag).role.bag.carved);
                                let from = marked_ahead(size, carved - 1, capacity);
                                let to = marked_ahead(size, carved, capacity);
                                mark_objects(start, size, from, to, carve_mark);
                            }
                        }
                        object
                    } else if (*bag).role.bag.sweep.released != 0 {
                        self.restore_granule(node, part, class, bag, start);
                        continue;
                    } else {
                        break;
                    };
                    (*bag).role.bag.live += 1;
                    // Linked in the order taken, so a thread hands a fresh bag's objects out
                    // in address order: a program that fills what it allocates, then walks it,
                    // streams forwards through memory (descending, the prefetchers missed
                    // the start of every object; see docs/JOURNAL.md "Carve order").
                    append(arena, &mut batch, object, zeroed, head_zeroed);
                }
                if is_full(bag, capacity) {
                    unlink(partial, bag);
                    // A heap keeps its full bags on a list of their own, for its drop.
                    if let Some(full) = self.full_list(part, class) {
                        push_front(full, bag);
                    }
                }
            }
        }
        if !batch.tail.is_null() {
            // SAFETY: the batch's objects are ours; its last one ends the chain.
            unsafe { arena.write_link(batch.tail, null_mut()) };
        }
        class_heap
            .out_of_bags
            .fetch_add(batch.count + untouched, Ordering::Relaxed);
        if batch.count + untouched != 0 {
            let ops = &self.node(node).ops;
            ops.bag_objects_taken
                .fetch_add((batch.count + untouched) as u64, Ordering::Relaxed);
            if from_bits != 0 {
                ops.bag_objects_reused
                    .fetch_add(from_bits as u64, Ordering::Relaxed);
            }
        }
        if batch.count == 0 {
            None
        } else {
            Some(batch)
        }
    }

    /// Moves free objects of `bag` (of `class`, starting at `start`) to the end of `batch`, by
    /// their free bits, until the batch holds `want` or the bag has none left, and returns how
    /// many moved. The bits give the objects' addresses, lowest first (in secure mode from a
    /// random word on), so nothing is read from them: each is written, its predecessor's link
    /// pointing at it, stores in address order that do not wait on each other. (A list of the
    /// bag's free objects made a refill read one cold link after another; docs/JOURNAL.md,
    /// issue 32's ninth round.) In secure mode an object carries the link its return wrote,
    /// null in the arena's encoding: anything else was written after its free, and is returned
    /// as the error with what it holds, the bag unchanged but for the objects moved before it.
    ///
    /// # Safety
    /// The class lock that owns `bag` is held, and the bag has objects listed.
    unsafe fn take_free(
        &self,
        bag: *mut UnitMeta,
        start: usize,
        class: SizeClass,
        batch: &mut Batch,
        want: usize,
        head_zeroed: &mut bool,
    ) -> Result<usize, (*mut u8, usize)> {
        let arena = self.arena;
        let secure = arena.is_secure();
        let size = class.size();
        let bits = arena.map().free_bits(start);
        let words = class.capacity().div_ceil(64);
        // SAFETY: the caller holds the class lock that owns `bag`, a live bag.
        let state = unsafe { &mut (*bag).role.bag };
        debug_assert!(state.listed != 0);
        let mut word = if secure {
            arena.bag_seed() as usize % words
        } else {
            0
        };
        let mut taken = 0;
        let mut result = Ok(());
        // Every word once at most: `listed` set bits lie among them.
        for _ in 0..words {
            let mut value = bits.word(word);
            while value != 0 && batch.count < want {
                let index = word * 64 + value.trailing_zeros() as usize;
                let object = (start + index * size) as *mut u8;
                // SAFETY: a free object of the bag, ours under the class lock.
                if secure && !unsafe { arena.read_link(object, Expect::Class(class)) }.is_null() {
                    // SAFETY: as above; the word the error names.
                    result = Err((object, unsafe { (object as *const usize).read() }));
                    break;
                }
                value &= value - 1;
                // SAFETY: the object is free in the bag, ours under the class lock; the
                // batch's objects are ours.
                unsafe { append(arena, batch, object, false, head_zeroed) };
                taken += 1;
            }
            bits.set_word(word, value);
            if batch.count == want || result.is_err() || usize::from(state.listed) == taken {
                break;
            }
            word = if word + 1 == words { 0 } else { word + 1 };
        }
        debug_assert!(taken != 0 || result.is_err());
        state.listed -= taken as u16;
        state.live += taken as u16;
        result.map(|()| taken)
    }

    /// One object of `class` for the program, straight from the bags (a thread without a cache:
    /// retired, detached, or `alloc_on_node`). Null when no memory is left. The node's inbox is
    /// drained first when it holds anything: a node without threads of its own (a far node
    /// serving cold requests) has nobody else to take its freed objects back between upkeep
    /// passes, and its bags would grow by every object freed.
    pub fn alloc_single(&self, node: NodeId, part: Partition, class: SizeClass) -> *mut u8 {
        self.drain_inbox(node);
        let Some(batch) = self.take_from_bags(node, part, class, 1) else {
            return null_mut();
        };
        self.hand_out_single(node, part, class, batch.head)
    }

    /// Counts one object taken straight from the bags as the program's (and marks it in the
    /// allocation bitmap in secure mode).
    fn hand_out_single(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
        object: *mut u8,
    ) -> *mut u8 {
        self.class_in(node, part, class)
            .allocs
            .fetch_add(1, Ordering::Relaxed);
        if self.arena.is_secure() {
            self.arena.note_allocated(object);
        }
        object
    }

    /// One object of `class` for `calloc`, straight from `node`'s own bags, and whether it is
    /// known to read as zero but for its first word (carved for the first time from a bag whose
    /// memory was untouched). `None` when the node's bags and region are exhausted.
    pub fn alloc_single_zeroed(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
    ) -> Option<(*mut u8, bool)> {
        let mut zeroed = false;
        let batch = self.take_from_node_bags(node, part, class, 1, &mut zeroed, None)?;
        Some((self.hand_out_single(node, part, class, batch.head), zeroed))
    }

    /// Takes back one object of `class` from `origin`'s region that the program frees without a
    /// thread cache, or reports the misuse.
    ///
    /// # Safety
    /// `object` must be a live object of `class` that the caller gives up (checked, and
    /// reported, in secure mode).
    pub unsafe fn free_single(&self, origin: NodeId, class: SizeClass, object: *mut u8) {
        if self.arena.is_secure() {
            if let Err(refusal) = self.arena.note_freed(object, class) {
                report(object, refusal.into());
            }
        }
        // SAFETY: the object is ours now; make it a one-object chain.
        unsafe { self.arena.write_link(object, null_mut()) };
        if let Err((object, misuse)) = self.return_to_bags(origin, class, object, true) {
            report(object, misuse);
        }
    }

    /// Takes back a batch a thread of `node` drained: into the ring if it has room (a slot, and
    /// the objects within the ring's budget: a grown thread list cuts batches of many times the
    /// class's batch), else into the bags. A refusal while other threads take from the ring
    /// grows its budget (see `ClassHeap::raise_ring_budget`) and the batch is offered again.
    /// Every object must be of `class` and from `node`'s region.
    pub fn release(&self, node: NodeId, part: Partition, class: SizeClass, batch: Batch) {
        self.note_rings_used(node, part, class);
        let ring = self.ring_shard(node, part, class, self.shard_here());
        ring.touched.store(true, Ordering::Relaxed);
        self.note_shard_operation(ring);
        let ops = &self.node(node).ops;
        // A partition's ring holds one batch: with many partitions, rings of the full budget
        // would pin many times the memory one class heap's ring does.
        let refused = if part == Partition::DEFAULT {
            let budget = ring.budget(class);
            ring.push(batch, budget, ops).err().and_then(|batch| {
                match ring.raise_budget(class, budget, &self.node(node).ring_grown_bytes) {
                    Some(raised) => ring.push(batch, raised, ops).err(),
                    None => Some(batch),
                }
            })
        } else {
            ring.push(batch, class.batch(), ops).err()
        };
        if let Some(batch) = refused {
            if let Err((object, misuse)) = self.return_to_bags(node, class, batch.head, false) {
                report(object, misuse);
            }
        }
    }

    /// [`Self::release`] (or, with `to_bags`, [`Self::return_to_bags`]) of a batch a thread
    /// gives back that may hold objects it stole from other nodes (its own region was
    /// exhausted): each node's objects go to that node's heap. Reports a pointer outside the
    /// arena.
    pub fn release_by_origin(
        &self,
        part: Partition,
        class: SizeClass,
        batch: Batch,
        to_bags: bool,
    ) {
        let empty = Batch {
            head: null_mut(),
            tail: null_mut(),
            count: 0,
        };
        let mut chains = [empty; MAX_NODES];
        let mut object = batch.head;
        while !object.is_null() {
            // SAFETY: the batch is a chain of free objects of `class` the caller owns.
            let next = unsafe { self.arena.read_link(object, Expect::Class(class)) };
            let Some(origin) = self.arena.origin_of(object as usize) else {
                report(object, Misuse::InvalidPointer);
            };
            let chain = &mut chains[origin];
            // SAFETY: as above; the object moves to its node's chain.
            unsafe { self.arena.write_link(object, chain.head) };
            if chain.tail.is_null() {
                chain.tail = object;
            }
            chain.head = object;
            chain.count += 1;
            object = next;
        }
        for (origin, chain) in chains.into_iter().enumerate() {
            if chain.count == 0 {
                continue;
            }
            let origin = NodeId(origin);
            if to_bags {
                if let Err((object, misuse)) = self.return_to_bags(origin, class, chain.head, false)
                {
                    report(object, misuse);
                }
            } else {
                self.release(origin, part, class, chain);
            }
        }
    }

    /// Returns a null-terminated chain of `class` objects of `node`'s region to their bags,
    /// releasing bags that fall empty, and counts them as the program's frees when
    /// `count_frees`. Each object goes to the class heap of its bag's partition (one lock per
    /// run of objects of one partition). Stops at the first object that is not a live object
    /// of this class (an invalid or double free) and reports it.
    pub fn return_to_bags(
        &self,
        node: NodeId,
        class: SizeClass,
        chain: *mut u8,
        count_frees: bool,
    ) -> Result<(), (*mut u8, Misuse)> {
        let map = self.arena.map();
        let size = class.size();
        let capacity = class.capacity() as u16;
        let partitioned = self.partitions() != 0 || self.arena.is_owned(chain as usize);
        // The node's next upkeep deadline dates the returns for the sweep.
        let stamp = self.node(node).next_upkeep.load(Ordering::Relaxed).max(1);
        let mut part = self.partition_of(chain as usize);
        let mut class_heap = self.class_in(node, part, class);
        let mut guard = class_heap.lock_counted(&self.node(node).ops);
        // Objects returned under the current lock, and whether the current object made us
        // switch locks already (a second switch for one object is a misuse, not a race).
        let mut run = 0u64;
        let mut switched = false;
        let bag_bytes = class.bag_bytes();
        let mut last: Option<crate::arena::BagAt> = None;
        let mut object = chain;
        let result = loop {
            if object.is_null() {
                break Ok(());
            }
            let address = object as usize;
            // The bag of the object before, when this one lies in it too (a batch in address
            // order mostly does): checked already, and ours under the class lock.
            let at = match last.filter(|at| address.wrapping_sub(at.start) < bag_bytes) {
                Some(at) => at,
                None => {
                    if self.arena.origin_of(address) != Some(node.index()) {
                        break Err((object, Misuse::InvalidPointer));
                    }
                    let Some(at) = self.arena.bag_at(address).filter(|at| at.class == class) else {
                        break Err((object, Misuse::InvalidPointer));
                    };
                    at
                }
            };
            let start = at.start;
            let offset = address - start;
            if !class.is_object_start(offset) {
                break Err((object, Misuse::InvalidPointer));
            }
            let bag = map.meta(at.first);
            if partitioned {
                // SAFETY: the tag says `bag` is a bag descriptor. Read without its lock, so
                // volatile: only a misuse (a bag carved again meanwhile) makes it change.
                let owner =
                    unsafe { core::ptr::addr_of!((*bag).role.bag.partition).read_volatile() };
                if owner != part.0 {
                    if switched || !self.is_partition(owner) {
                        break Err((object, Misuse::InvalidPointer));
                    }
                    self.finish_run(node, class_heap, run, count_frees);
                    drop(guard);
                    run = 0;
                    part = Partition(owner);
                    last = None;
                    class_heap = self.class_in(node, part, class);
                    guard = class_heap.lock_counted(&self.node(node).ops);
                    switched = true;
                    continue;
                }
            }
            switched = false;
            last = Some(at);
            // SAFETY: chains given to us are linked through first words of free objects.
            let next = unsafe { self.arena.read_link(object, Expect::Class(class)) };
            if !next.is_null() && self.arena.origin_of(next as usize) != Some(node.index()) {
                // Every object of the chain is of this node: this link was overwritten.
                drop(guard);
                report_damaged_link(self.arena, object, crate::ds::stored_link(next));
            }
            // SAFETY: the class lock is held and the tag says `bag` is a bag of this class (of
            // this partition, checked above).
            unsafe {
                // Secure mode carves in a random order, so the count says nothing about which
                // objects were carved (and the allocation bitmap vouched for this one).
                if !self.arena.is_secure() && offset >= (*bag).role.bag.carved as usize * size {
                    break Err((object, Misuse::InvalidPointer));
                }
                if (*bag).role.bag.live == 0
                    || super::sweep::starts_released(class, (*bag).role.bag.sweep.released, offset)
                {
                    break Err((object, Misuse::DoubleFree));
                }
                let was_full = is_full(bag, capacity);
                // Its bit, not its memory: the object is not touched again until a refill
                // hands it out. A bit already set is a second free of it.
                if !map.free_bits(start).set(offset / size) {
                    break Err((object, Misuse::DoubleFree));
                }
                if self.arena.is_secure() {
                    // What a refill checks: null, in the arena's encoding.
                    self.arena.write_link(object, null_mut());
                }
                (*bag).role.bag.listed += 1;
                (*bag).role.bag.live -= 1;
                (*bag).role.bag.sweep.returned_at = stamp;
                run += 1;
                if self.settle_returned(node, part, class, class_heap, bag, was_full) {
                    // Its span left us: the next object finds its own bag.
                    last = None;
                }
            }
            object = next;
        };
        self.finish_run(node, class_heap, run, count_frees);
        drop(guard);
        result
    }

    /// Puts a bag of (`part`, `class`) that objects just came back to where it now
    /// belongs, and says whether it left the lists the refills take from: one with nothing out
    /// any more goes off the list it was on (the partial list, or the full list when
    /// `was_full`) to the class's spares, or its span back to its region or owned heap (true);
    /// one that was full goes to the front of the partial list.
    ///
    /// # Safety
    /// The class lock of `class_heap` (of `node`, `part`, `class`) is held, and `bag` is the
    /// descriptor of one of its bags, full before these returns when `was_full`.
    pub(super) unsafe fn settle_returned(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
        class_heap: &ClassHeap,
        bag: *mut UnitMeta,
        was_full: bool,
    ) -> bool {
        // SAFETY: forwarded contract: the lock is held, so the lists and the bag are ours.
        unsafe {
            if (*bag).role.bag.live != 0 {
                if was_full {
                    if let Some(full) = self.full_list(part, class) {
                        unlink(full, bag);
                    }
                    push_front(&mut *class_heap.partial.get(), bag);
                }
                return false;
            }
            if !was_full {
                unlink(&mut *class_heap.partial.get(), bag);
            } else if let Some(full) = self.full_list(part, class) {
                unlink(full, bag);
            }
            if self.keeps_as_spare(node, part, class, bag) {
                keep_spare(class_heap, bag);
                return true;
            }
            self.release_bag(node, part, class, class_heap, bag);
        }
        true
    }

    /// Gives the span of an empty bag of (`part`, `class`) on `node` back to its region (or its
    /// first-class heap).
    ///
    /// # Safety
    /// The class lock of `class_heap` (of `node`, `part`, `class`) is held, and `bag` is one of
    /// its bags, on no list, with no object out.
    pub(super) unsafe fn release_bag(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
        class_heap: &ClassHeap,
        bag: *mut UnitMeta,
    ) {
        let map = self.arena.map();
        let start = map.address_of(map.unit_of_meta(bag));
        // SAFETY: forwarded contract.
        unsafe {
            class_heap.bags.fetch_sub(1, Ordering::Relaxed);
            self.arena.map().free_bits(start).clear(class.capacity());
            if let Some(info) = self.partition_info(part) {
                info.reclaimed.fetch_add(1, Ordering::Relaxed);
            }
            self.forget_released(node, class, bag);
            if (*bag).role.bag.moved || (*bag).role.bag.unsettled {
                // Its pages are on the far node (or some are, after a move back left part
                // done): given back now, so the span never serves another bag from there.
                self.arena
                    .release_in_use(start, (*bag).units << crate::size_class::UNIT_SHIFT);
            }
            // No object of the bag is out any more.
            if part.is_owned() {
                self.owned_free_bag(part, start, (*bag).units);
            } else {
                self.arena.free_span(start, (*bag).units);
            }
        }
    }

    /// The end of a run of `return_to_bags` under one class lock (still held): the run's
    /// objects are no longer out of the bags, the class heap has bags to sweep, and the objects
    /// are counted as frees if asked.
    fn finish_run(&self, node: NodeId, class_heap: &ClassHeap, run: u64, count_frees: bool) {
        if run == 0 {
            return;
        }
        self.node(node)
            .ops
            .bag_objects_returned
            .fetch_add(run, Ordering::Relaxed);
        class_heap
            .out_of_bags
            .fetch_sub(run as usize, Ordering::Relaxed);
        class_heap.to_sweep.store(true, Ordering::Relaxed);
        if count_frees {
            class_heap.frees.fetch_add(run, Ordering::Relaxed);
        }
    }

    /// Hands a chain of objects of `origin`'s region to that node's inbox.
    ///
    /// # Safety
    /// A well-formed chain of freed objects from `origin`'s region, owned by the caller.
    pub unsafe fn send_remote(&self, origin: NodeId, head: *mut u8, tail: *mut u8, count: usize) {
        let node_heap = self.node(origin);
        node_heap
            .remote_frees
            .fetch_add(count as u64, Ordering::Relaxed);
        node_heap.ops.inbox_pushes.fetch_add(1, Ordering::Relaxed);
        let arena = self.arena;
        // SAFETY: forwarded contract; the link written is `tail`'s, in the arena's encoding.
        unsafe {
            node_heap
                .inbox
                .push_chain_with(head, tail, |tail, next| arena.write_link(tail, next))
        };
    }

    /// Sorts `node`'s inbox back into its bags. Cheap when the inbox is empty.
    pub fn drain_inbox(&self, node: NodeId) {
        let node_heap = self.node(node);
        if node_heap.inbox.is_empty_hint() {
            return;
        }
        let mut object = node_heap.inbox.take_all();
        if !object.is_null() {
            node_heap.ops.inbox_takes.fetch_add(1, Ordering::Relaxed);
        }
        // Group by class so each class lock is taken once (per partition), and each class's free
        // count (remote frees are counted here, not by the freeing thread) is added once.
        let mut chains = [null_mut::<u8>(); NUM_CLASSES];
        while !object.is_null() {
            // SAFETY: inbox chains are linked through first words of freed objects.
            let next = unsafe { self.arena.read_link(object, Expect::Node(node.index())) };
            let tag = match self.arena.tag_checked(object as usize) {
                Some(tag) if tag.is_bag() => tag,
                _ => report(object, Misuse::InvalidPointer),
            };
            let class = tag.class().index();
            // SAFETY: as above; we own the object now.
            unsafe { self.arena.write_link(object, chains[class]) };
            chains[class] = object;
            object = next;
        }
        for (class, &chain) in chains.iter().enumerate() {
            if !chain.is_null() {
                if let Err((object, misuse)) =
                    self.return_to_bags(node, SizeClass(class as u8), chain, true)
                {
                    report(object, misuse);
                }
            }
        }
    }
}

/// # Safety
/// The class lock owning the list is held and `bag` is on it.
pub(super) unsafe fn unlink(list: &mut *mut UnitMeta, bag: *mut UnitMeta) {
    // SAFETY: forwarded contract; links are only touched under that lock.
    unsafe {
        if (*bag).prev.is_null() {
            *list = (*bag).next;
        } else {
            (*(*bag).prev).next = (*bag).next;
        }
        if !(*bag).next.is_null() {
            (*(*bag).next).prev = (*bag).prev;
        }
        (*bag).next = null_mut();
        (*bag).prev = null_mut();
    }
}

/// # Safety
/// The class lock owning the list is held and `bag` is on no list.
pub(super) unsafe fn push_front(list: &mut *mut UnitMeta, bag: *mut UnitMeta) {
    // SAFETY: forwarded contract.
    unsafe {
        (*bag).prev = null_mut();
        (*bag).next = *list;
        if !(*list).is_null() {
            (**list).prev = bag;
        }
        *list = bag;
    }
}

/// Appends `bag` to `list` (after its last bag).
///
/// # Safety
/// The class lock that owns `list` is held and `bag` is on no list.
pub(super) unsafe fn push_back(list: &mut *mut UnitMeta, bag: *mut UnitMeta) {
    // SAFETY: forwarded contract; links are only touched under that lock.
    unsafe {
        (*bag).next = null_mut();
        let mut last = *list;
        if last.is_null() {
            (*bag).prev = null_mut();
            *list = bag;
            return;
        }
        while !(*last).next.is_null() {
            last = (*last).next;
        }
        (*last).next = bag;
        (*bag).prev = last;
    }
}

/// Appends `object` to `batch`: the batch's last object links to it (the caller ends the
/// chain once the batch is complete). `zeroed` says whether it reads as zero but for its link
/// word, which matters when it heads the batch.
///
/// # Safety
/// `object` is a free object the caller owns, as are the batch's objects.
unsafe fn append(
    arena: &Arena,
    batch: &mut Batch,
    object: *mut u8,
    zeroed: bool,
    head_zeroed: &mut bool,
) {
    if batch.tail.is_null() {
        batch.head = object;
        *head_zeroed = zeroed;
    } else {
        // SAFETY: forwarded contract.
        unsafe { arena.write_link(batch.tail, object) };
    }
    batch.tail = object;
    batch.count += 1;
}

/// The end of a dense bag's marked objects once `carved` of its `capacity` objects of `size`
/// bytes are carved: a page's worth of objects and one more past the carve (all of a bag of
/// fewer). A free of an object the bag has not carved yet within that reach (an address the
/// program never got, such as `p + 4096` of a 16-byte block) meets the mark, is screened, and
/// is refused as an invalid pointer (`suspect.rs`: the bag never carved it). The marks touch
/// one page past what the carve itself touches, not the whole bag: a thread that takes a few
/// objects of a class keeps the rest of its bag untouched.
pub(super) fn marked_ahead(size: usize, carved: usize, capacity: u16) -> usize {
    (carved + crate::os::PAGE_SIZE / size + 1).min(usize::from(capacity))
}

/// Writes `mark` into the screen word of the objects `from..to` of the bag at `start` (objects
/// of `size` bytes): a dense bag's objects as its carve reaches them ([`marked_ahead`]), and
/// those a sweep's restore lists again.
///
/// # Safety
/// The objects must be the caller's (not out, not on any list another thread reads without the
/// class lock) and hold the screen word (`size` at least `SCREEN_WORD` + a word).
pub(super) unsafe fn mark_objects(start: usize, size: usize, from: usize, to: usize, mark: usize) {
    debug_assert!(size >= crate::ds::SCREEN_WORD + core::mem::size_of::<usize>());
    for index in from..to {
        // SAFETY: the caller's objects, each holding its screen word.
        unsafe { ((start + index * size + crate::ds::SCREEN_WORD) as *mut usize).write(mark) };
    }
}

/// True when `bag` has nothing left to hand out: no free object listed, none uncarved and none
/// in a released granule. Full bags are on no list.
///
/// # Safety
/// The class lock owning `bag` is held.
pub(super) unsafe fn is_full(bag: *mut UnitMeta, capacity: u16) -> bool {
    // SAFETY: forwarded contract.
    unsafe {
        (*bag).role.bag.listed == 0
            && (*bag).role.bag.carved == capacity
            && (*bag).role.bag.sweep.released == 0
    }
}
