// An allocation-heavy program for cgtrace's JVM test: APP threads ("app-N") allocate short-lived
// arrays and keep a rotating live set, so the garbage collector has real work in every cycle.
import java.util.concurrent.atomic.AtomicLong;

public class GcBurn {
    public static void main(String[] args) throws Exception {
        int threads = args.length > 0 ? Integer.parseInt(args[0]) : 2;
        int seconds = args.length > 1 ? Integer.parseInt(args[1]) : 30;
        AtomicLong sink = new AtomicLong();
        Thread[] ts = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            ts[t] = new Thread(() -> {
                Object[] live = new Object[20_000];
                long i = 0;
                long end = System.nanoTime() + seconds * 1_000_000_000L;
                long acc = 0;
                while (System.nanoTime() < end) {
                    // Some work per allocation, so the threads want a whole CPU each.
                    for (int k = 0; k < 200; k++) acc += (acc ^ k) * 31 + i;
                    byte[] b = new byte[256 + (int) (i % 1024)];
                    b[0] = (byte) acc;
                    live[(int) (i % live.length)] = b;
                    i++;
                }
                sink.addAndGet(acc);
            }, "app-" + t);
            ts[t].start();
        }
        for (Thread t : ts) t.join();
        System.out.println(sink.get());
    }
}
