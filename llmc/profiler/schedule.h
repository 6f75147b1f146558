/*
 * The --profile-start/--profile-steps window of a training run, shared by train_gpt2 and train_gpt2cu: which
 * steps are recorded, when a collector that is slow to start (CUPTI) should be armed, and when the profile
 * is written. Steps are the run's 0-based step indices; a resumed run keeps its numbering, so a window it
 * has partly passed records what is left of it, and one it has wholly passed records nothing.
 */
#pragma once
#include <string>

#include "llmc/util/utils.h"

namespace llmc::prof {

class ProfileSchedule {
public:
    enum class Next {
        keep_going, // nothing to do after this step
        arm,        // start the collector now: the next step is in the window
        write,      // the window is over (or the run ends inside it): write what was recorded
        give_up,    // the run ends (or has passed the window) with nothing recorded
    };

    ProfileSchedule(int first, int count) : first_(first), count_(count) {}

    // Arm before the run's first step: the window starts at step 0, so there is no step before it to do it after.
    bool arm_at_start() const { return first_ == 0; }
    bool in_window(int step) const { return !closed_ && step >= first_ && step < first_ + count_; }

    // Step `step` was recorded (call once per recorded step, in order).
    void recorded(int step) {
        if (recorded_++ == 0) first_recorded_ = step;
    }
    int num_recorded() const { return recorded_; }

    // After step `step` has run and been printed; `armed`: the collector is running. Arming happens one step
    // ahead so the collector's start-up lands outside the traced steps. write and give_up close the schedule.
    Next after_step(int step, bool last_step, bool armed) {
        if (closed_) return Next::keep_going;
        if (last_step || step + 1 >= first_ + count_) return close(recorded_ > 0 ? Next::write : Next::give_up);
        if (!armed && step + 1 >= first_) return Next::arm;
        return Next::keep_going;
    }
    // The collector could not start (another tool holds CUPTI): record nothing more.
    void abandon() { closed_ = true; }

    // "steps 3-5" (or "step 3"): the window, 1-based as the step lines print them.
    std::string window() const { return steps_text(first_ + 1, count_); }
    // "steps 3-4": the steps recorded.
    std::string recorded_steps() const { return steps_text(first_recorded_ + 1, recorded_); }
    // Why nothing was written, for give_up; last_step: the last step the run ran.
    std::string nothing_recorded(int last_step, const std::string& dir) const {
        return last_step < first_
                   ? strprintf("profile: the run ended before step %d; nothing written to %s", first_ + 1, dir.c_str())
                   : strprintf("profile: the run started after %s; nothing written to %s", window().c_str(),
                               dir.c_str());
    }

private:
    static std::string steps_text(int first, int count) {
        return count == 1 ? strprintf("step %d", first) : strprintf("steps %d-%d", first, first + count - 1);
    }
    Next close(Next n) {
        closed_ = true;
        return n;
    }
    int first_, count_;
    int recorded_ = 0, first_recorded_ = -1;
    bool closed_ = false;
};

} // namespace llmc::prof
